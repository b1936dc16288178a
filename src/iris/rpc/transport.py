"""Keep-alive HTTP/1.1 on the standard library: the controller to its workers, clients to it.

Each thread keeps one connection per address. A general-purpose pooled client serialises on its
pool when it talks to hundreds of hosts at once (measured here: 300 reconciles took ~2.2 s through
one; ~0.1 s this way), and a reconcile round must reach every worker. It also costs a command
line ~0.3 s to import and set up (TLS context included) before its first request.
"""

from __future__ import annotations

import http.client
import socket
import threading
from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import ssl


class TransportError(Exception):
    """The peer could not be reached, did not answer in time, or broke the connection mid-request.

    ``sent`` is False only when the connection itself failed, so the request surely never arrived;
    otherwise the peer may have received and acted on it even though no answer came back."""

    def __init__(self, message: str, *, timed_out: bool = False, sent: bool = True) -> None:
        super().__init__(message)
        self.timed_out = timed_out
        self.sent = sent


@dataclass(frozen=True, slots=True)
class HttpReply:
    status: int
    body: bytes


class KeepAliveTransport:
    def __init__(self, *, timeout_s: float = 3.0) -> None:
        self.timeout_s = timeout_s
        self._local = threading.local()
        self._lock = threading.Lock()
        self._all: set[http.client.HTTPConnection] = set()

    def request(
        self,
        method: str,
        address: str,
        path: str,
        body: bytes | None = None,
        *,
        timeout_s: float | None = None,
        headers: dict[str, str] | None = None,
    ) -> HttpReply:
        headers = {**({"content-type": "application/json"} if body is not None else {}), **(headers or {})}
        for attempt in (0, 1):
            conn, reused = self._connection(address)
            try:
                conn.timeout = timeout_s or self.timeout_s
                if conn.sock is not None:
                    conn.sock.settimeout(conn.timeout)
                else:
                    self._connect(address, conn)
                conn.request(method, path, body=body, headers=headers)
                resp = conn.getresponse()
                data = resp.read()
                if resp.will_close:
                    self._drop(address)
                return HttpReply(resp.status, data)
            except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError) as exc:
                self._drop(address)
                if reused and attempt == 0:
                    continue  # the worker closed an idle connection: one fresh try
                raise TransportError(f"{type(exc).__name__}: {exc}") from None
            except (OSError, http.client.HTTPException) as exc:
                self._drop(address)
                raise TransportError(
                    f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__,
                    timed_out=isinstance(exc, TimeoutError),
                ) from None
            except BaseException:
                self._drop(address)  # interrupted mid-request (Ctrl-C): never reuse it half-read
                raise
        raise TransportError("unreachable")  # pragma: no cover - the loop always returns or raises

    def _connect(self, address: str, conn: http.client.HTTPConnection) -> None:
        try:
            conn.connect()
        except OSError as exc:
            self._drop(address)
            raise TransportError(
                f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__,
                timed_out=isinstance(exc, TimeoutError),
                sent=False,
            ) from None

    def _connections(self) -> dict[str, http.client.HTTPConnection]:
        conns = getattr(self._local, "conns", None)
        if conns is None:
            conns = self._local.conns = {}
        return conns

    def _connection(self, address: str) -> tuple[http.client.HTTPConnection, bool]:
        """``address`` is ``host:port`` (plain HTTP) or ``https://host[:port]``."""
        conns = self._connections()
        conn = conns.get(address)
        if conn is not None:
            return conn, True
        if address.startswith("https://"):
            host, _, port = address.removeprefix("https://").rpartition(":")
            if not port.isdigit():
                host, port = address.removeprefix("https://"), "443"
            conn = _NoDelayTlsConnection(
                host.strip("[]"), int(port), timeout=self.timeout_s, context=_tls_context()
            )
        else:
            host, _, port = address.removeprefix("http://").rpartition(":")
            conn = _NoDelayConnection(host.strip("[]"), int(port), timeout=self.timeout_s)
        conns[address] = conn
        with self._lock:
            self._all.add(conn)
        return conn, False

    def _drop(self, address: str) -> None:
        conn = self._connections().pop(address, None)
        if conn is not None:
            conn.close()
            with self._lock:
                self._all.discard(conn)

    def close(self) -> None:
        """Close every thread's connections (a thread that calls again opens a new one)."""
        with self._lock:
            conns, self._all = self._all, set()
        for conn in conns:
            conn.close()


@cache
def _tls_context() -> ssl.SSLContext:
    import ssl  # only HTTPS needs it (~35 ms to import)

    return ssl.create_default_context()


class _NoDelayConnection(http.client.HTTPConnection):
    def connect(self) -> None:
        super().connect()
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


class _NoDelayTlsConnection(http.client.HTTPSConnection):
    def connect(self) -> None:
        super().connect()
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
