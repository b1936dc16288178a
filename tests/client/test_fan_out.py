"""FanOut against real HTTP servers: every call at once from one thread, one timeout window for the
whole however many peers hang, kept-alive connections, and errors that say whether a call was sent."""

from __future__ import annotations

import json
import select
import socket
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from iris.rpc.fan_out import Call, FanOut
from iris.rpc.transport import RECV_BYTES, HttpReply, TransportError


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # (server port, client address): the kernel may give connections to different servers the
    # same local port, so a client address alone does not name a connection.
    peers: list[tuple[int, tuple[str, int]]] = []

    def log_message(self, *_: object) -> None:
        pass

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("content-length") or 0))
        type(self).peers.append((self.server.server_address[1], self.client_address))
        if self.path == "/hang":
            time.sleep(2.0)
        data = json.dumps({"port": self.server.server_address[1], "echo": body.decode()}).encode()
        self.send_response(200)
        self.send_header("content-length", str(len(data)))
        if self.path == "/close":
            self.send_header("connection", "close")
            self.close_connection = True
        elif self.path == "/drop":
            self.close_connection = True  # closed after answering, though it said keep-alive
        self.end_headers()
        self.wfile.write(data)


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: object, client_address: object) -> None:
        pass  # a caller that gave up on /hang


@pytest.fixture
def servers() -> Iterator[list[str]]:
    _Handler.peers = []
    running = [_Server(("127.0.0.1", 0), _Handler) for _ in range(20)]
    for httpd in running:
        threading.Thread(target=httpd.serve_forever, args=(0.05,), daemon=True).start()
    yield [f"127.0.0.1:{httpd.server_address[1]}" for httpd in running]
    for httpd in running:
        httpd.shutdown()
        httpd.server_close()


def _port(reply: HttpReply | TransportError) -> int:
    assert isinstance(reply, HttpReply), reply
    return json.loads(reply.body)["port"]


def test_every_call_is_answered_in_order_over_kept_alive_connections(servers: list[str]) -> None:
    fan = FanOut(timeout_s=5)
    calls = [Call(a, "POST", "/r", f"body {i}".encode()) for i, a in enumerate(servers)]
    for _ in range(3):
        replies = fan.call_all(calls)
        assert [_port(r) for r in replies] == [int(a.rsplit(":", 1)[1]) for a in servers]
        assert [json.loads(r.body)["echo"] for r in replies if isinstance(r, HttpReply)] == [
            f"body {i}" for i in range(len(servers))
        ]
    assert len(set(_Handler.peers)) == len(servers)  # one connection per server, reused by rounds
    fan.close()


def test_an_answer_many_reads_long_arrives_whole(servers: list[str]) -> None:
    """An answer longer than one read (``RECV_BYTES``) is put together from all of its reads."""
    body = ("x" * 1023 + "\n") * (3 * RECV_BYTES // 1024 + 7)
    fan = FanOut(timeout_s=10)
    (reply,) = fan.call_all([Call(servers[0], "POST", "/r", body.encode())])
    assert isinstance(reply, HttpReply) and json.loads(reply.body)["echo"] == body
    fan.close()


def test_hung_peers_cost_one_timeout_window_and_a_refused_one_was_not_sent(servers: list[str]) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        free = f"127.0.0.1:{probe.getsockname()[1]}"
    fan = FanOut(timeout_s=0.5)
    calls = [Call(a, "POST", "/hang" if i < 10 else "/r") for i, a in enumerate(servers)]
    started = time.monotonic()
    replies = fan.call_all([*calls, Call(free, "POST", "/r")])
    assert time.monotonic() - started < 1.5  # ten hung servers, one window
    hung, answered, refused = replies[:10], replies[10:20], replies[20]
    assert all(isinstance(r, TransportError) and r.timed_out and r.sent for r in hung)
    assert all(isinstance(r, HttpReply) and r.status == 200 for r in answered)
    assert isinstance(refused, TransportError) and not refused.sent
    # The hung calls' connections were dropped; the next round reconnects and is answered.
    assert all(isinstance(r, HttpReply) for r in fan.call_all([Call(a, "POST", "/r") for a in servers]))
    fan.close()


def test_a_connection_the_server_closed_is_replaced(servers: list[str]) -> None:
    fan = FanOut(timeout_s=5)
    address = servers[0]
    assert _port(fan.call_all([Call(address, "POST", "/close")])[0])
    assert _port(fan.call_all([Call(address, "POST", "/r")])[0])  # a fresh connection
    # The server drops a connection it had kept alive (its idle timeout, a restart): the next
    # call finds it closed, and one fresh try is answered without an error.
    assert _port(fan.call_all([Call(address, "POST", "/drop")])[0])
    select.select([fan._idle[address]], [], [], 5)  # the server's close has reached us
    before = len(_Handler.peers)
    assert _port(fan.call_all([Call(address, "POST", "/r")])[0])
    assert _Handler.peers[before:] and _Handler.peers[-1] != _Handler.peers[before - 1]
    fan.close()
