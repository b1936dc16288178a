"""The SDK's HTTP client on the standard library, against a real HTTP server on loopback."""

from __future__ import annotations

import json
import signal
import socket
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from iris.rpc.errors import FailedPrecondition, NotFound, Unavailable
from iris.rpc.http import HttpClient
from iris.rpc.transport import KeepAliveTransport, TransportError


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    seen: list[tuple[str, str, dict[str, str], bytes]] = []
    peers: set[tuple[str, int]] = set()

    def log_message(self, *_: object) -> None:
        pass

    def _answer(self, status: int, body: object, *, close: bool = False) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        if close:
            self.send_header("connection", "close")
        self.end_headers()
        self.wfile.write(data)
        if close:
            self.close_connection = True

    def _handle(self) -> None:
        length = int(self.headers.get("content-length") or 0)
        body = self.rfile.read(length) if length else b""
        type(self).seen.append((self.command, self.path, dict(self.headers), body))
        type(self).peers.add(self.client_address)
        if self.path.startswith("/missing"):
            self._answer(404, {"error": {"code": "not_found", "message": "job /a/b does not exist"}})
        elif self.path.startswith("/conflict"):
            self._answer(409, {"error": {"code": "failed_precondition", "message": "name in use"}})
        elif self.path.startswith("/slow"):
            time.sleep(1.5)
            self._answer(200, {"slow": True})
        elif self.path.startswith("/bye"):
            self._answer(200, {"bye": True}, close=True)
        elif self.path.startswith("/chunked"):
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.send_header("transfer-encoding", "chunked")
            self.end_headers()
            for part in (b'{"chunked":', b" [1, 2, 3]}"):
                self.wfile.write(b"%x;ext=1\r\n%s\r\n" % (len(part), part))
            self.wfile.write(b"0\r\nx-trailer: yes\r\n\r\n")
        elif self.path.startswith("/unsized"):
            self.send_response(200)  # no length, no chunks: the body ends when the connection does
            self.send_header("connection", "close")
            self.end_headers()
            self.wfile.write(b'{"unsized": true}')
            self.close_connection = True
        elif self.path.startswith("/garbage"):
            self.wfile.write(b"SSH-2.0-OpenSSH\r\n\r\n")
            self.close_connection = True
        else:
            self._answer(200, {"path": self.path, "body": body.decode()})

    do_GET = do_POST = _handle


class _QuietServer(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: object, client_address: object) -> None:
        pass  # a client that hung up on /slow is what some tests do


@pytest.fixture
def server() -> Iterator[str]:
    _Handler.seen = []
    _Handler.peers = set()
    httpd = _QuietServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()


def test_query_values_and_json_bodies_are_sent_as_the_api_reads_them(server: str) -> None:
    http = HttpClient(server, token="tok-1")
    got = http.request(
        "GET", "/api/v1/jobs", params={"state": ["RUNNING", "PENDING"], "desc": True, "x": None}
    )
    assert got["path"] == "/api/v1/jobs?state=RUNNING&state=PENDING&desc=true"
    echoed = http.request("POST", "/api/v1/jobs", json_body={"name": "été", "n": 1})
    assert json.loads(echoed["body"]) == {"name": "été", "n": 1}
    method, _, headers, _ = _Handler.seen[-1]
    assert method == "POST"
    assert headers["authorization"] == "Bearer tok-1"
    assert headers["content-type"] == "application/json"


def test_calls_share_one_kept_alive_connection(server: str) -> None:
    http = HttpClient(server)
    for _ in range(5):
        http.request("GET", "/ping")
    assert len(_Handler.peers) == 1


def test_an_error_answer_is_the_typed_error_the_server_named(server: str) -> None:
    http = HttpClient(server)
    with pytest.raises(NotFound, match="job /a/b does not exist"):
        http.request("GET", "/missing")
    with pytest.raises(FailedPrecondition, match="name in use"):
        http.request("POST", "/conflict", json_body={})
    assert http.request("GET", "/ping")["path"] == "/ping"  # the connection is still good


def test_a_server_that_closes_the_connection_is_reconnected_to(server: str) -> None:
    http = HttpClient(server)
    assert http.request("GET", "/bye") == {"bye": True}
    assert http.request("GET", "/ping")["path"] == "/ping"
    assert len(_Handler.peers) == 2


def test_no_server_and_a_silent_server_each_say_so_in_one_sentence(server: str) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        free = probe.getsockname()[1]
    with pytest.raises(
        Unavailable, match=r"cannot reach the controller at http://127.0.0.1:\d+: is it running\?"
    ):
        HttpClient(f"http://127.0.0.1:{free}").request("GET", "/ping")
    with pytest.raises(Unavailable, match="did not answer in time"):
        HttpClient(server, timeout_s=0.3).request("GET", "/slow")


def test_chunked_unsized_and_non_http_answers(server: str) -> None:
    """Bodies sent in chunks (with extensions and trailers) or until the server closes are read
    whole, the connection stays usable after each, and a peer that is not HTTP is one error."""
    http = HttpClient(server)
    assert http.request("GET", "/chunked") == {"chunked": [1, 2, 3]}
    assert http.request("GET", "/ping")["path"] == "/ping"  # the chunked answer left it in step
    assert http.request("GET", "/unsized") == {"unsized": True}
    assert http.request("GET", "/ping")["path"] == "/ping"  # a new connection after the close
    with pytest.raises(Unavailable, match="cannot reach the controller"):
        http.request("GET", "/garbage")
    assert http.request("GET", "/ping")["path"] == "/ping"


def test_a_failed_call_says_whether_its_request_may_have_arrived(server: str) -> None:
    """A refused connection surely delivered nothing; a request sent whose answer never came may
    have been acted on (the controller's reaping depends on telling these apart)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        free = probe.getsockname()[1]
    transport = KeepAliveTransport(timeout_s=0.3)
    address = server.removeprefix("http://")
    with pytest.raises(TransportError) as refused:
        transport.request("GET", f"127.0.0.1:{free}", "/ping")
    assert refused.value.sent is False
    with pytest.raises(TransportError) as silent:
        transport.request("GET", address, "/slow")
    assert silent.value.sent is True and silent.value.timed_out
    assert any(path == "/slow" for _, path, _, _ in _Handler.seen)  # it did arrive
    transport.close()


def test_a_call_interrupted_by_ctrl_c_leaves_the_client_usable(server: str) -> None:
    """Ctrl-C (or SIGTERM made KeyboardInterrupt) lands while an answer is awaited; the client's next
    call, e.g. the CLI stopping the job, must get through on a fresh connection."""
    http = HttpClient(server)
    http.request("GET", "/ping")

    def interrupt(*_: object) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGALRM, interrupt)
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.2)
        with pytest.raises(KeyboardInterrupt):
            http.request("GET", "/slow")
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    assert http.request("POST", "/stop", json_body={})["path"] == "/stop"
