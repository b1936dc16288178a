"""A controller without tokens cannot be driven by a web page the user happens to open.

A browser lets any page send "simple" requests to any address, the developer's loopback included:
a form post (``text/plain``, form encodings) or a ``fetch`` without a body, with no preflight. And
with DNS rebinding a page on ``attacker.example`` can even read the answers: the browser thinks it
talks to the attacker's name, which now resolves to 127.0.0.1. So, when no auth is configured:

- a state-changing request (POST, PUT, PATCH, DELETE) must say ``Content-Type: application/json``
  (a bundle upload: ``application/gzip`` or ``application/octet-stream``), types a page can send
  cross-origin only after a CORS preflight, which this controller never grants: 415 otherwise;
- the ``Host`` header must name this controller: an IP address, a loopback or single-label name,
  a cluster-internal name (``*.svc``, ``*.cluster.local``), this machine's host names, the host of
  the URL it advertises, or one listed in ``$IRIS_CONTROLLER_ALLOWED_HOSTS`` (comma-separated):
  421 otherwise. A rebinding attacker's page is served under a name the attacker owns.

No ``Access-Control-Allow-Origin`` is ever sent, and every answer forbids framing (``HttpGuard``).
With tokens configured none of this is needed: a browser does not attach a bearer token by itself.
"""

from __future__ import annotations

import ipaddress
import json
import os
import socket
from collections.abc import Callable
from urllib.parse import urlsplit

from iris.cluster.controller.http_guard import ASGIApp, Receive, Scope, Send

ALLOWED_HOSTS_ENV = "IRIS_CONTROLLER_ALLOWED_HOSTS"
_STATE_CHANGING = frozenset({"POST", "PUT", "PATCH", "DELETE"})
_BUNDLE_PREFIX = "/api/v1/bundles/"
_BUNDLE_TYPES = frozenset({"application/gzip", "application/octet-stream", "application/json"})
_INTERNAL_SUFFIXES = (".localhost", ".svc", ".cluster.local")


def host_name(header: str) -> str:
    """The name in a Host header, without port or IPv6 brackets, lower case."""
    header = header.strip().lower()
    if header.startswith("["):
        return header[1:].split("]", 1)[0]
    return header.rsplit(":", 1)[0] if header.count(":") == 1 else header


def is_own_name(name: str, known: set[str]) -> bool:
    if not name:
        return False
    try:
        ipaddress.ip_address(name)
        return True  # an address is what it is: no rebinding through a literal
    except ValueError:
        pass
    name = name.rstrip(".")
    return "." not in name or name.endswith(_INTERNAL_SUFFIXES) or name in known


def own_names(url: str) -> set[str]:
    names = {"localhost", socket.gethostname().lower(), socket.getfqdn().lower()}
    advertised = urlsplit(url).hostname if url else None
    if advertised:
        names.add(advertised.lower())
    extra = os.environ.get(ALLOWED_HOSTS_ENV, "")
    names.update(n.strip().lower() for n in extra.split(",") if n.strip())
    return names


class CrossSiteGuard:
    """The two checks above, for a controller with no tokens (``enabled()`` says so per request)."""

    def __init__(self, app: ASGIApp, *, enabled: Callable[[], bool], url: Callable[[], str]) -> None:
        self.app = app
        self.enabled = enabled
        self.url = url
        self._names: set[str] | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not self.enabled():
            await self.app(scope, receive, send)
            return
        headers = dict(scope.get("headers") or [])
        name = host_name(headers.get(b"host", b"").decode("latin-1"))
        if not is_own_name(name, self._known()):
            await _refuse(
                send,
                421,
                "misdirected_request",
                f"this controller does not answer to the host name {name!r} (a web page cannot drive "
                f"it through DNS rebinding); add the name to ${ALLOWED_HOSTS_ENV} if it is yours",
            )
            return
        if scope["method"] in _STATE_CHANGING:
            raw = headers.get(b"content-type", b"").decode("latin-1")
            media = raw.split(";", 1)[0].strip().lower()
            bundle = str(scope.get("path", "")).startswith(_BUNDLE_PREFIX)
            if media != "application/json" and not (bundle and media in _BUNDLE_TYPES):
                await _refuse(
                    send,
                    415,
                    "unsupported_media_type",
                    f"a {scope['method']} to this controller must be sent as application/json "
                    f"(got {raw or 'no content type'}): other types are what a web page can send cross-site",
                )
                return
        await self.app(scope, receive, send)

    def _known(self) -> set[str]:
        if self._names is None:
            self._names = own_names(self.url())
        return self._names


async def _refuse(send: Send, status: int, code: str, message: str) -> None:
    body = json.dumps({"error": {"code": code, "message": message}}).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
