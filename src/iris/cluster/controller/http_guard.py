"""ASGI guards in front of the controller's API: request-size limits and browser security headers.

A request body is refused with 413 before it is buffered once it is over the limit (declared by
Content-Length or counted while it streams), so a client cannot make the controller hold a 100 MB
spec in memory. Workspace bundles have their own, larger limit (see ``bundles.py``).
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

# kube-apiserver caps a request at 3 MB; a job spec (callable payload included) fits well inside.
MAX_REQUEST_BYTES = 4 * 1024 * 1024
# Routes whose bodies are bounded by their own handler.
_OWN_LIMIT_PREFIXES = ("/api/v1/bundles/",)

SECURITY_HEADERS: tuple[tuple[bytes, bytes], ...] = (
    (
        b"content-security-policy",
        b"default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data: blob:; "
        b"connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'",
    ),
    (b"x-frame-options", b"DENY"),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
)


def _too_large(limit: int) -> tuple[int, bytes]:
    message = f"the request body is over this controller's {limit}-byte limit"
    return 413, json.dumps({"error": {"code": "REQUEST_TOO_LARGE", "message": message}}).encode()


class HttpGuard:
    """Bounds request bodies and adds security headers to every response."""

    def __init__(self, app: ASGIApp, *, max_request_bytes: int = MAX_REQUEST_BYTES) -> None:
        self.app = app
        self.max_request_bytes = max_request_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = self.max_request_bytes
        limited = not str(scope.get("path", "")).startswith(_OWN_LIMIT_PREFIXES)
        headers = dict(scope.get("headers") or [])
        declared = headers.get(b"content-length", b"")
        if limited and declared.isdigit() and int(declared) > limit:
            await _respond(send, *_too_large(limit))
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                present = {name.lower() for name, _ in message.get("headers", [])}
                extra = [(name, value) for name, value in SECURITY_HEADERS if name not in present]
                message["headers"] = list(message.get("headers", [])) + extra
            await send(message)

        if not limited:
            await self.app(scope, receive, send_with_headers)
            return
        body = await _read_bounded(receive, limit)
        if body is None:
            await _respond(send, *_too_large(limit))
            return
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send_with_headers)


async def _read_bounded(receive: Receive, limit: int) -> bytes | None:
    """The whole body, or None once it is over ``limit`` bytes (the rest is not read)."""
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return b"".join(chunks)
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            return None
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)


async def _respond(send: Send, status: int, body: bytes) -> None:
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers + list(SECURITY_HEADERS)})
    await send({"type": "http.response.body", "body": body})
