"""HTTP client base: JSON in, typed models or typed IrisErrors out, one clear error when down."""

from __future__ import annotations

from typing import Any, TypeVar

import httpx
from pydantic import BaseModel

from iris.rpc.errors import Unavailable, error_from_body

M = TypeVar("M", bound=BaseModel)


class HttpClient:
    def __init__(self, base_url: str, *, token: str | None = None, timeout_s: float = 30.0) -> None:
        self.base_url = base_url.rstrip("/")
        headers = {"authorization": f"Bearer {token}"} if token else {}
        self._http = httpx.Client(base_url=self.base_url, timeout=timeout_s, headers=headers)

    def request(
        self,
        method: str,
        path: str,
        *,
        json_body: Any = None,
        params: Any = None,
        timeout: float | None = None,
    ) -> Any:
        kwargs: dict[str, Any] = {"params": params}
        if timeout is not None:
            kwargs["timeout"] = timeout
        if isinstance(json_body, BaseModel):
            kwargs["content"] = json_body.model_dump_json(exclude_none=True)
            kwargs["headers"] = {"content-type": "application/json"}
        elif json_body is not None:
            kwargs["json"] = json_body
        try:
            resp = self._http.request(method, path, **kwargs)
        except httpx.TimeoutException:
            raise Unavailable(f"the controller at {self.base_url} did not answer in time") from None
        except httpx.HTTPError:
            raise Unavailable(f"cannot reach the controller at {self.base_url}: is it running?") from None
        if resp.status_code >= 400:
            try:
                body = resp.json()
            except ValueError:
                body = None
            raise error_from_body(resp.status_code, body)
        if resp.status_code == 204 or not resp.content:
            return None
        return resp.json()

    def get(self, path: str, model: type[M], **params: Any) -> M:
        return model.model_validate(
            self.request("GET", path, params={k: v for k, v in params.items() if v is not None})
        )

    def post(self, path: str, model: type[M] | None = None, body: Any = None) -> Any:
        data = self.request("POST", path, json_body=body)
        return model.model_validate(data) if model is not None else data

    def close(self) -> None:
        self._http.close()
