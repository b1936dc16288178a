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
# Bytes asked of each recv. Under glibc's smallest mmap threshold (128 KiB): a larger buffer is
# mapped and unmapped on every read in a process whose threshold has not risen yet, which made
# the same reconcile round cost 0.1-0.3 ms more in one process than in another.
RECV_BYTES = 64 * 1024


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


class BadAnswer(Exception):
    """The peer's bytes are not an HTTP/1.1 answer we can read."""


class PeerClosed(Exception):
    """The peer closed the connection before answering (an idle keep-alive connection it dropped)."""


class KeepAliveTransport:
    def __init__(self, *, timeout_s: float = 3.0) -> None:
        self.timeout_s = timeout_s
        self._local = threading.local()
        self._lock = threading.Lock()
        self._all: set[socket.socket] = set()

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
        head = request_head(method, address, path, body, headers)
        for attempt in (0, 1):
            conn = self._connections().get(address)
            reused = conn is not None
            if conn is None:
                conn = self._connect(address, timeout)
            try:
                conn.settimeout(timeout)
                conn.sendall(head + body if body else head)
                answer = AnswerParser(method)
                while not answer.feed(conn.recv(RECV_BYTES)):
                    pass
                if answer.close:
                    self._drop(address)
                return HttpReply(answer.status, answer.body)
            except (PeerClosed, BrokenPipeError, ConnectionResetError) as exc:
                self._drop(address)
                if reused and attempt == 0:
                    continue  # the peer closed an idle connection: one fresh try
                raise TransportError(describe(exc)) from None
            except (OSError, BadAnswer) as exc:
                self._drop(address)
                raise TransportError(describe(exc), timed_out=isinstance(exc, TimeoutError)) from None
            except BaseException:
                self._drop(address)  # interrupted mid-request (Ctrl-C): never reuse it half-read
                raise
        raise TransportError("unreachable")  # pragma: no cover - the loop always returns or raises

    def _connections(self) -> dict[str, socket.socket]:
        conns: dict[str, socket.socket] | None = getattr(self._local, "conns", None)
        if conns is None:
            conns = self._local.conns = {}
        return conns

    def _connect(self, address: str, timeout: float) -> socket.socket:
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
            raise TransportError(describe(exc), timed_out=isinstance(exc, TimeoutError), sent=False) from None
        self._connections()[address] = sock
        with self._lock:
            self._all.add(sock)
        return sock

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


def request_head(
    method: str, address: str, path: str, body: bytes | None, headers: dict[str, str] | None
) -> bytes:
    host = address.removeprefix("https://").removeprefix("http://")
    lines = [f"{method} {path} HTTP/1.1", f"Host: {host}"]
    if body is not None:
        lines.append(f"content-length: {len(body)}")
        if not headers or not any(k.lower() == "content-type" for k in headers):
            lines.append("content-type: application/json")
    elif method in ("POST", "PUT", "PATCH", "DELETE"):
        lines.append("content-length: 0")
        if not headers or not any(k.lower() == "content-type" for k in headers):
            # A controller without tokens takes writes only as JSON (what a web page cannot send).
            lines.append("content-type: application/json")
    for name, value in (headers or {}).items():
        if "\r" in value or "\n" in value or "\r" in name or "\n" in name:
            raise ValueError(f"header {name!r} holds a line break")
        lines.append(f"{name}: {value}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


class AnswerParser:
    """One HTTP/1.1 answer, fed the bytes as they arrive (b"" when the peer closes)."""

    def __init__(self, method: str) -> None:
        self._method = method
        self._buf = bytearray()
        self._body_at = -1  # where the body starts, once the head is in
        self._length: int | None = None
        self._chunked = False
        self._chunks: list[bytes] = []
        self._cursor = 0  # chunked: the next chunk-size line
        self.status = 0
        self.close = False
        self.body = b""
        self.received = False  # any byte at all

    def feed(self, data: bytes) -> bool:
        """True once the answer is complete. Raises PeerClosed (nothing came) or BadAnswer."""
        if not data:
            return self._at_eof()
        self.received = True
        self._buf += data
        if self._body_at < 0:
            if not self._read_head():
                return False
            if self._method == "HEAD" or self.status in _NO_BODY or 100 <= self.status < 200:
                return True
        if self._chunked:
            return self._read_chunks()
        if self._length is not None:
            if len(self._buf) - self._body_at < self._length:
                return False
            self.body = bytes(self._buf[self._body_at : self._body_at + self._length])
            return True
        return False  # no length: the body runs until the server closes

    def _at_eof(self) -> bool:
        if not self.received:
            raise PeerClosed("the server closed the connection")
        if self._body_at >= 0 and self._length is None and not self._chunked:
            self.body, self.close = bytes(self._buf[self._body_at :]), True
            return True
        raise BadAnswer("the server closed the connection in the middle of its answer")

    def _read_head(self) -> bool:
        end = self._buf.find(b"\r\n\r\n")
        if end < 0:
            if len(self._buf) > MAX_HEAD_BYTES:
                raise BadAnswer("the answer's headers are too long")
            return False
        lines = bytes(self._buf[:end]).split(b"\r\n")
        parts = lines[0].split(None, 2)
        if len(parts) < 2 or not parts[0].startswith(b"HTTP/1.") or not parts[1].isdigit():
            raise BadAnswer(f"not an HTTP answer: {lines[0][:80]!r}")
        self.status = int(parts[1])
        self.close = parts[0] == b"HTTP/1.0"
        for line in lines[1:]:
            name, sep, value = line.partition(b":")
            if not sep:
                raise BadAnswer(f"a malformed header line: {line[:80]!r}")
            name, value = name.strip().lower(), value.strip()
            if name == b"content-length":
                if not value.isdigit():
                    raise BadAnswer(f"a bad content-length: {value[:40]!r}")
                self._length = int(value)
            elif name == b"transfer-encoding":
                self._chunked = b"chunked" in value.lower()
            elif name == b"connection":
                token = value.lower()
                self.close = b"close" in token or (self.close and b"keep-alive" not in token)
        self._body_at = self._cursor = end + 4
        if self._length is None and not self._chunked:
            self.close = True
        return True

    def _read_chunks(self) -> bool:
        buf = self._buf
        while True:
            eol = buf.find(b"\r\n", self._cursor)
            if eol < 0:
                return False
            size_text = bytes(buf[self._cursor : eol]).split(b";", 1)[0].strip()
            try:
                size = int(size_text, 16)
            except ValueError:
                raise BadAnswer(f"a bad chunk size: {size_text[:40]!r}") from None
            if size == 0:
                # Trailers (if any) end with an empty line.
                if buf.startswith(b"\r\n", eol + 2):
                    self.body = b"".join(self._chunks)
                    return True
                if buf.find(b"\r\n\r\n", eol) < 0:
                    return False
                self.body = b"".join(self._chunks)
                return True
            start, stop = eol + 2, eol + 2 + size
            if len(buf) < stop + 2:
                return False
            if not buf.startswith(b"\r\n", stop):
                raise BadAnswer("a chunk was cut off")
            self._chunks.append(bytes(buf[start:stop]))
            self._cursor = stop + 2


def describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


@cache
def _tls_context() -> ssl.SSLContext:
    import ssl  # only HTTPS needs it (~35 ms to import)

    return ssl.create_default_context()
