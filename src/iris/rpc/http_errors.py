"""One error shape for every Iris HTTP server (controller and worker): an exception becomes
``{"error": {"code": ..., "message": ...}}`` with its status code, never a traceback."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import ValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException

from iris.rpc.errors import IrisError

log = logging.getLogger("iris.service")

_HTTP_CODES = {400: "invalid_argument", 404: "not_found", 405: "method_not_allowed", 413: "too_large"}
_HTTP_MESSAGES = {404: "no such API path", 405: "this API path does not take that method"}


def error_body(code: str, message: str) -> dict[str, Any]:
    return {"error": {"code": code, "message": message}}


def error_response(exc: IrisError) -> JSONResponse:
    return JSONResponse(status_code=exc.status_code, content=error_body(exc.code, exc.message))


def validation_message(exc: RequestValidationError | ValidationError) -> str:
    """The first three problems of a request, in one line (``body``/``query``/``path`` left out)."""
    parts: list[str] = []
    for err in exc.errors()[:3]:
        loc = ".".join(str(x) for x in err.get("loc", ()) if x not in ("body", "query", "path"))
        msg = str(err.get("msg", "invalid"))
        msg = msg.removeprefix("Value error, ")
        parts.append(f"{loc}: {msg}" if loc else msg)
    return "invalid request: " + "; ".join(parts)


def install_error_handlers(app: FastAPI, *, on_iris_error: Callable[[IrisError], None] | None = None) -> None:
    """Our errors, bad requests, routing errors (404, 405, undecodable bodies) and anything
    unexpected (500, logged) all answer in the one shape; ``on_iris_error`` sees each IrisError."""

    @app.exception_handler(IrisError)
    async def _iris_error(_: Request, exc: IrisError) -> JSONResponse:
        if on_iris_error is not None:
            on_iris_error(exc)
        return error_response(exc)

    @app.exception_handler(RequestValidationError)
    async def _validation_error(_: Request, exc: RequestValidationError) -> JSONResponse:
        return JSONResponse(status_code=400, content=error_body("invalid_argument", validation_message(exc)))

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        message = _HTTP_MESSAGES.get(exc.status_code, str(exc.detail))
        return JSONResponse(
            status_code=exc.status_code,
            content=error_body(_HTTP_CODES.get(exc.status_code, "http_error"), message),
            headers=exc.headers,
        )

    @app.exception_handler(Exception)
    async def _unexpected(_: Request, exc: Exception) -> JSONResponse:
        log.exception("unexpected error")
        return JSONResponse(
            status_code=500, content=error_body("internal", f"internal error: {type(exc).__name__}")
        )
