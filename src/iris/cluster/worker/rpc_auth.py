"""Only the controller drives a worker: an ASGI guard in front of every route of the worker's API.

In order, before any route sees the request: no signature headers → 401 (the body is not read);
a body that is not ``application/json`` → 415 (a browser's no-cors ``text/plain`` POST ends here,
and it cannot send the signature headers anyway); a body over the route's bound → 413; a bad,
stale or replayed signature → 401. Only ``GET /healthz`` (worker id and "ok") and ``GET /metrics``
(aggregate counters, no job or attempt names) are open, for probes and Prometheus scrapers.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from iris.rpc.signing import SIGNED_HEADERS, RequestVerifier

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

OPEN_ROUTES = frozenset({("GET", "/healthz"), ("GET", "/metrics")})
# A reconcile carries the run specs of new attempts inline; everything else is small.
RECONCILE_MAX_BODY = 128 * 1024 * 1024
DEFAULT_MAX_BODY = 1024 * 1024
_BODY_METHODS = frozenset({"POST", "PUT", "PATCH"})


class SignedRequestsOnly:
    def __init__(self, app: ASGIApp, verifier: RequestVerifier) -> None:
        self.app = app
        self.verifier = verifier

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        method: str = scope["method"]
        path: str = scope["path"]
        if (method, path) in OPEN_ROUTES:
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        if not all(headers.get(name) for name in SIGNED_HEADERS):
            await _refuse(
                send,
                401,
                "unauthenticated",
                "this worker only obeys its controller: the request is not signed",
            )
            return
        limit = RECONCILE_MAX_BODY if path == "/reconcile" else DEFAULT_MAX_BODY
        if method in _BODY_METHODS:
            media_type = headers.get("content-type", "").split(";")[0].strip().lower()
            if media_type != "application/json":
                await _refuse(
                    send, 415, "unsupported_media_type", "the worker accepts only application/json bodies"
                )
                return
        declared = headers.get("content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > limit):
            await _refuse(send, 413, "payload_too_large", f"request bodies are limited to {limit} bytes")
            return
        body = bytearray()
        more = True
        while more:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            body += message.get("body", b"")
            more = message.get("more_body", False)
            if len(body) > limit:
                await _refuse(send, 413, "payload_too_large", f"request bodies are limited to {limit} bytes")
                return
        raw_path = scope.get("raw_path") or path.encode()
        target = raw_path.decode("latin-1")
        if scope.get("query_string"):
            target += "?" + scope["query_string"].decode("latin-1")
        error = self.verifier.verify(method, target, headers, bytes(body))
        if error is not None:
            await _refuse(send, 401, "unauthenticated", error)
            return
        sent = False

        async def replay() -> Message:
            nonlocal sent
            if sent:
                return await receive()
            sent = True
            return {"type": "http.request", "body": bytes(body), "more_body": False}

        await self.app(scope, replay, send)


async def _refuse(send: Send, status: int, code: str, message: str) -> None:
    payload = json.dumps({"error": {"code": code, "message": message}}).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(payload)).encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": payload})
