"""Keep-alive HTTP/1.1 on plain sockets: the controller to its workers, clients to it.

Each thread keeps one connection per address. A general-purpose pooled client serialises on its
pool when it talks to hundreds of hosts at once (measured here: 300 reconciles took ~2.2 s through
one; ~0.1 s this way), and a reconcile round must reach every worker. It also costs a command
line ~0.3 s to import and set up (TLS context included) before its first request.

The wire work is done here rather than by ``http.client``: a reconcile round makes one call per
worker, and ``http.client`` parses every answer's headers through the ``email`` package, which
was a third of the controller's CPU per call. This speaks the subset our servers use: a request
with a ``content-length`` body; an answer with ``content-length``, chunked, or read to close.
"""

from __future__ import annotations

import io
import socket
import threading
from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import ssl

# An answer's status line and headers: more than this is not one of our servers.
MAX_HEAD_BYTES = 64 * 1024
_NO_BODY = frozenset({204, 304})


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


class _BadAnswer(Exception):
    """The peer's bytes are not an HTTP/1.1 answer we can read."""


class _Closed(Exception):
    """The peer closed the connection before answering (an idle keep-alive connection it dropped)."""


class _Connection:
    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.reader = sock.makefile("rb")

    def close(self) -> None:
        try:
            self.reader.close()
        finally:
            self.sock.close()


class KeepAliveTransport:
    def __init__(self, *, timeout_s: float = 3.0) -> None:
        self.timeout_s = timeout_s
        self._local = threading.local()
        self._lock = threading.Lock()
        self._all: set[_Connection] = set()

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
        """``address`` is ``host:port`` (plain HTTP) or ``https://host[:port]``."""
        timeout = timeout_s or self.timeout_s
        head = _request_head(method, address, path, body, headers)
        for attempt in (0, 1):
            conn = self._connections().get(address)
            reused = conn is not None
            if conn is None:
                conn = self._connect(address, timeout)
            try:
                conn.sock.settimeout(timeout)
                conn.sock.sendall(head + body if body else head)
                status, close, payload = _read_answer(conn.reader, method)
                if close:
                    self._drop(address)
                return HttpReply(status, payload)
            except (_Closed, BrokenPipeError, ConnectionResetError) as exc:
                self._drop(address)
                if reused and attempt == 0:
                    continue  # the peer closed an idle connection: one fresh try
                raise TransportError(_describe(exc)) from None
            except (OSError, _BadAnswer) as exc:
                self._drop(address)
                raise TransportError(_describe(exc), timed_out=isinstance(exc, TimeoutError)) from None
            except BaseException:
                self._drop(address)  # interrupted mid-request (Ctrl-C): never reuse it half-read
                raise
        raise TransportError("unreachable")  # pragma: no cover - the loop always returns or raises

    def _connections(self) -> dict[str, _Connection]:
        conns = getattr(self._local, "conns", None)
        if conns is None:
            conns = self._local.conns = {}
        return conns

    def _connect(self, address: str, timeout: float) -> _Connection:
        tls = address.startswith("https://")
        host, _, port = address.removeprefix("https://").removeprefix("http://").rpartition(":")
        if not port.isdigit():
            host, port = address.removeprefix("https://"), "443"
        host = host.strip("[]")
        try:
            sock = socket.create_connection((host, int(port)), timeout=timeout)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if tls:
                sock = _tls_context().wrap_socket(sock, server_hostname=host)
        except OSError as exc:
            raise TransportError(
                _describe(exc), timed_out=isinstance(exc, TimeoutError), sent=False
            ) from None
        conn = _Connection(sock)
        self._connections()[address] = conn
        with self._lock:
            self._all.add(conn)
        return conn

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
        self._local = threading.local()


def _request_head(
    method: str, address: str, path: str, body: bytes | None, headers: dict[str, str] | None
) -> bytes:
    host = address.removeprefix("https://").removeprefix("http://")
    lines = [f"{method} {path} HTTP/1.1", f"Host: {host}"]
    if body is not None:
        lines.append(f"content-length: {len(body)}")
        if not headers or not any(k.lower() == "content-type" for k in headers):
            lines.append("content-type: application/json")
    elif method in ("POST", "PUT", "PATCH"):
        lines.append("content-length: 0")
    for name, value in (headers or {}).items():
        if "\r" in value or "\n" in value or "\r" in name or "\n" in name:
            raise ValueError(f"header {name!r} holds a line break")
        lines.append(f"{name}: {value}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def _read_answer(reader: io.BufferedReader, method: str) -> tuple[int, bool, bytes]:
    """(status, whether the connection closes after it, body) of one answer."""
    readline = reader.readline
    status_line = readline(MAX_HEAD_BYTES)
    if not status_line:
        raise _Closed("the server closed the connection")
    parts = status_line.split(None, 2)
    if len(parts) < 2 or not parts[0].startswith(b"HTTP/1.") or not parts[1].isdigit():
        raise _BadAnswer(f"not an HTTP answer: {status_line[:80]!r}")
    status = int(parts[1])
    close = parts[0] == b"HTTP/1.0"
    length: int | None = None
    chunked = False
    used = len(status_line)
    while True:
        line = readline(MAX_HEAD_BYTES)
        used += len(line)
        if not line or used > MAX_HEAD_BYTES:
            raise _BadAnswer("the answer's headers were cut off or too long")
        if line in (b"\r\n", b"\n"):
            break
        name, sep, value = line.partition(b":")
        if not sep:
            raise _BadAnswer(f"a malformed header line: {line[:80]!r}")
        name = name.strip().lower()
        value = value.strip()
        if name == b"content-length":
            if not value.isdigit():
                raise _BadAnswer(f"a bad content-length: {value[:40]!r}")
            length = int(value)
        elif name == b"transfer-encoding":
            chunked = b"chunked" in value.lower()
        elif name == b"connection":
            token = value.lower()
            close = b"close" in token or (close and b"keep-alive" not in token)
    if method == "HEAD" or status in _NO_BODY or 100 <= status < 200:
        return status, close, b""
    if chunked:
        return status, close, _read_chunked(reader)
    if length is not None:
        body = reader.read(length)
        if len(body) != length:
            raise _BadAnswer(f"the answer's body was cut off ({len(body)} of {length} bytes)")
        return status, close, body
    return status, True, reader.read()  # no length: the body runs until the server closes


def _read_chunked(reader: io.BufferedReader) -> bytes:
    readline = reader.readline
    read = reader.read
    out = []
    while True:
        size_line = readline(MAX_HEAD_BYTES)
        size_text = size_line.split(b";", 1)[0].strip()
        try:
            size = int(size_text, 16)
        except ValueError:
            raise _BadAnswer(f"a bad chunk size: {size_line[:40]!r}") from None
        if size == 0:
            while readline(MAX_HEAD_BYTES) not in (b"\r\n", b"\n", b""):
                pass  # trailers
            return b"".join(out)
        chunk = read(size)
        if len(chunk) != size or read(2) != b"\r\n":
            raise _BadAnswer("a chunk was cut off")
        out.append(chunk)


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


@cache
def _tls_context() -> ssl.SSLContext:
    import ssl  # only HTTPS needs it (~35 ms to import)

    return ssl.create_default_context()
