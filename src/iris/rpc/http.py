"""HTTP client base: JSON in, typed models or typed IrisErrors out, one clear error when down."""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, TypeVar, cast
from urllib.parse import urlencode, urlsplit

from iris.rpc.errors import Unavailable, error_from_body
from iris.rpc.transport import KeepAliveTransport, TransportError

if TYPE_CHECKING:
    from pydantic import BaseModel

M = TypeVar("M", bound="BaseModel")


class HttpClient:
    """Thread-safe: each thread keeps its own keep-alive connection to the controller."""

    def __init__(self, base_url: str, *, token: str | None = None, timeout_s: float = 30.0) -> None:
        self.base_url = base_url.rstrip("/")
        parts = urlsplit(self.base_url)
        self._address = f"https://{parts.netloc}" if parts.scheme == "https" else parts.netloc
        if parts.scheme == "http" and parts.port is None:
            self._address = f"{parts.netloc}:80"
        self._prefix = parts.path
        self._headers = {"authorization": f"Bearer {token}"} if token else {}
        self._transport = KeepAliveTransport(timeout_s=timeout_s)

    def request(
        self,
        method: str,
        path: str,
        *,
        json_body: Any = None,
        params: Mapping[str, Any] | None = None,
        timeout: float | None = None,
    ) -> Any:
        body: bytes | None = None
        if isinstance(json_body, bytes):  # already JSON
            body = json_body
        elif _is_model(json_body):
            body = json_body.model_dump_json(exclude_none=True).encode()
        elif json_body is not None:
            body = json.dumps(json_body, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode()
        target = self._prefix + path
        if params:
            target += "?" + urlencode(_query(params), doseq=True)
        try:
            reply = self._transport.request(
                method, self._address, target, body, timeout_s=timeout, headers=self._headers
            )
        except TransportError as exc:
            if exc.timed_out:
                raise Unavailable(f"the controller at {self.base_url} did not answer in time") from None
            raise Unavailable(f"cannot reach the controller at {self.base_url}: is it running?") from None
        if reply.status >= 400:
            try:
                error_body = json.loads(reply.body)
            except ValueError:
                error_body = None
            raise error_from_body(reply.status, error_body)
        if reply.status == 204 or not reply.body:
            return None
        return json.loads(reply.body)

    def get(self, path: str, model: type[M], **params: Any) -> M:
        return model.model_validate(
            self.request("GET", path, params={k: v for k, v in params.items() if v is not None})
        )

    def post(self, path: str, model: type[M] | None = None, body: Any = None) -> Any:
        data = self.request("POST", path, json_body=body)
        return model.model_validate(data) if model is not None else data

    def close(self) -> None:
        self._transport.close()

    def __enter__(self) -> HttpClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _is_model(value: Any) -> bool:
    """A pydantic model, without importing pydantic (~0.25 s) when nothing has: then none exists."""
    pydantic = sys.modules.get("pydantic")
    return pydantic is not None and isinstance(value, pydantic.BaseModel)


def _query(params: Mapping[str, Any]) -> dict[str, Any]:
    """Query values as the API reads them: booleans as true/false, lists as repeated keys."""
    out: dict[str, Any] = {}
    for key, value in params.items():
        if value is None:
            continue
        if isinstance(value, (list, tuple)):
            out[key] = [_scalar(v) for v in cast("list[Any] | tuple[Any, ...]", value)]
        else:
            out[key] = _scalar(value)
    return out


def _scalar(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)
