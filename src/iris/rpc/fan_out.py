"""Many HTTP/1.1 calls at once from one thread: the controller's reconcile of every worker.

A thread per call in flight makes each answer wait for the GIL behind the others (a pool of 64
threads took ~300 ms for 1,000 workers here, 4 threads ~235 ms), while few threads let a handful
of dead workers cost a timeout window each. Here every call is a non-blocking socket in one
selector: all are in flight together, the round costs one timeout window however many workers
hang, and no answer waits for a thread. Connections are kept alive between rounds, per address.
Plain HTTP only (workers serve plain HTTP; every call is signed).
"""

from __future__ import annotations

import errno
import selectors
import socket
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass

from iris.rpc.transport import (
    RECV_BYTES,
    AnswerParser,
    BadAnswer,
    HttpReply,
    PeerClosed,
    TransportError,
    describe,
    request_head,
)


@dataclass(frozen=True, slots=True)
class Call:
    address: str  # host:port
    method: str
    path: str
    body: bytes | None = None
    headers: dict[str, str] | None = None


class _InFlight:
    __slots__ = ("call", "out", "sent", "sock", "connected", "reused", "answer", "result", "retried")

    def __init__(self, call: Call, out: bytes) -> None:
        self.call = call
        self.out = out
        self.sent = 0
        self.sock: socket.socket | None = None
        self.connected = False
        self.reused = False
        self.answer = AnswerParser(call.method)
        self.result: HttpReply | TransportError | None = None
        self.retried = False


class FanOut:
    def __init__(self, *, timeout_s: float = 3.0) -> None:
        self.timeout_s = timeout_s
        self._idle: dict[str, socket.socket] = {}
        self._lock = threading.Lock()  # one fan-out at a time: they share the idle connections

    def call_all(
        self, calls: Sequence[Call], *, timeout_s: float | None = None
    ) -> list[HttpReply | TransportError]:
        """Every call's answer or error, in order; the whole takes at most ``timeout_s``."""
        with self._lock:
            return self._run(calls, timeout_s or self.timeout_s)

    def close(self) -> None:
        with self._lock:
            for sock in self._idle.values():
                sock.close()
            self._idle.clear()

    def _run(self, calls: Sequence[Call], timeout_s: float) -> list[HttpReply | TransportError]:
        deadline = time.monotonic() + timeout_s
        flights: list[_InFlight] = []
        sel = selectors.DefaultSelector()
        try:
            for call in calls:
                flight = _InFlight(call, b"")
                flights.append(flight)
                try:
                    head = request_head(call.method, call.address, call.path, call.body, call.headers)
                except ValueError as exc:
                    flight.result = TransportError(str(exc), sent=False)
                    continue
                flight.out = head + call.body if call.body else head
                self._start(flight, sel)
            pending = sum(1 for f in flights if f.result is None)
            while pending:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                for key, events in sel.select(remaining):
                    flight = key.data
                    if flight.result is None:
                        self._step(flight, events, sel)
                    if flight.result is not None:
                        pending -= 1
            for flight in flights:
                if flight.result is None:
                    self._finish(
                        flight,
                        TransportError(
                            "TimeoutError: timed out"
                            if flight.connected
                            else "TimeoutError: connect timed out",
                            timed_out=True,
                            sent=flight.connected,
                        ),
                        sel,
                    )
        finally:
            sel.close()
        return [f.result for f in flights if f.result is not None]

    def _start(self, flight: _InFlight, sel: selectors.BaseSelector) -> None:
        sock = self._idle.pop(flight.call.address, None)
        if sock is not None:
            flight.sock, flight.connected, flight.reused = sock, True, True
            sel.register(sock, selectors.EVENT_WRITE, flight)
            return
        host, _, port = flight.call.address.rpartition(":")
        try:
            family, kind, proto, _, sockaddr = socket.getaddrinfo(
                host.strip("[]"), int(port), type=socket.SOCK_STREAM
            )[0]
            sock = socket.socket(family, kind, proto)
        except (OSError, ValueError) as exc:  # a name that does not resolve, a bad port
            flight.result = TransportError(describe(exc), sent=False)
            return
        sock.setblocking(False)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        flight.sock, flight.connected, flight.reused = sock, False, False
        try:
            code = sock.connect_ex(sockaddr)
        except OSError as exc:
            sock.close()
            flight.sock = None
            flight.result = TransportError(describe(exc), sent=False)
            return
        if code not in (0, errno.EINPROGRESS):
            sock.close()
            flight.sock = None
            flight.result = TransportError(f"ConnectionError: {errno.errorcode.get(code, code)}", sent=False)
            return
        sel.register(sock, selectors.EVENT_WRITE, flight)

    def _step(self, flight: _InFlight, events: int, sel: selectors.BaseSelector) -> None:
        sock = flight.sock
        assert sock is not None
        try:
            if not flight.connected:
                code = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
                if code:
                    raise ConnectionRefusedError(code, errno.errorcode.get(code, str(code)))
                flight.connected = True
            if flight.sent < len(flight.out):
                flight.sent += sock.send(flight.out[flight.sent :])
                if flight.sent == len(flight.out):
                    sel.modify(sock, selectors.EVENT_READ, flight)
                return
            data = sock.recv(RECV_BYTES)
            if flight.answer.feed(data):
                self._finish(flight, HttpReply(flight.answer.status, flight.answer.body), sel)
        except (BlockingIOError, InterruptedError):
            return
        except (PeerClosed, BrokenPipeError, ConnectionResetError) as exc:
            if flight.reused and not flight.retried and not flight.answer.received:
                self._retry(flight, sel)  # the worker closed an idle connection: one fresh try
                return
            self._finish(flight, TransportError(describe(exc), sent=flight.connected), sel)
        except (OSError, BadAnswer) as exc:
            self._finish(flight, TransportError(describe(exc), sent=flight.connected), sel)

    def _retry(self, flight: _InFlight, sel: selectors.BaseSelector) -> None:
        self._drop(flight, sel)
        flight.retried, flight.sent = True, 0
        flight.answer = AnswerParser(flight.call.method)
        self._start(flight, sel)

    def _finish(
        self, flight: _InFlight, result: HttpReply | TransportError, sel: selectors.BaseSelector
    ) -> None:
        flight.result = result
        sock = flight.sock
        if sock is None:
            return
        sel.unregister(sock)
        flight.sock = None
        if (
            isinstance(result, HttpReply)
            and not flight.answer.close
            and flight.call.address not in self._idle
        ):
            self._idle[flight.call.address] = sock
        else:
            sock.close()

    def _drop(self, flight: _InFlight, sel: selectors.BaseSelector) -> None:
        if flight.sock is not None:
            sel.unregister(flight.sock)
            flight.sock.close()
            flight.sock = None
