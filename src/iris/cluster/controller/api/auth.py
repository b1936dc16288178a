"""Every /api/ request carries a principal; with no tokens configured, everyone is admin."""

from __future__ import annotations

from typing import Any

from fastapi.responses import JSONResponse

from iris.cluster.controller.api.common import principal_var
from iris.cluster.controller.controller import Controller
from iris.rpc.errors import IrisError
from iris.rpc.http_errors import error_response


class Authenticate:
    """ASGI middleware: authenticates the bearer token and sets the caller for the request."""

    def __init__(self, inner: Any, controller: Controller) -> None:
        self.inner = inner
        self.controller = controller

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope["path"].startswith("/api/"):
            header = dict(scope.get("headers") or []).get(b"authorization")
            try:
                principal = self.controller.auth.authenticate(header.decode("latin-1") if header else None)
            except IrisError as exc:
                response: JSONResponse = error_response(exc)
                await response(scope, receive, send)
                return
            token = principal_var.set(principal)
            try:
                await self.inner(scope, receive, send)
            finally:
                principal_var.reset(token)
            return
        await self.inner(scope, receive, send)
