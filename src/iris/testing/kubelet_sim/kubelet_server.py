"""The node agent's kubelet port: container logs over HTTPS for the API server's ``pods/log``.

The API server connects with its kubelet client certificate (``--kubelet-client-certificate``);
callers without a certificate signed by our CA are refused at the TLS handshake.
"""

from __future__ import annotations

import datetime as dt
import ssl
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

from iris.testing.kubelet_sim.pod_logs import ContainerLog, LogQuery

# (namespace, pod, container) -> the container's log, or None when the kubelet has no such container
LogFinder = Callable[[str, str, str], ContainerLog | None]
MAX_TAIL_LINES = 100_000


def _query(params: dict[str, list[str]]) -> LogQuery:
    def first(name: str) -> str | None:
        values = params.get(name)
        return values[0] if values else None

    tail = first("tailLines")
    since_seconds = first("sinceSeconds")
    since_time = first("sinceTime")
    limit = first("limitBytes")
    since: dt.datetime | None = None
    if since_seconds is not None:
        since = dt.datetime.now(dt.UTC) - dt.timedelta(seconds=int(since_seconds))
    elif since_time is not None:
        since = dt.datetime.fromisoformat(since_time.replace("Z", "+00:00"))
    return LogQuery(
        timestamps=first("timestamps") == "true",
        tail_lines=min(int(tail), MAX_TAIL_LINES) if tail is not None else None,
        since=since,
        limit_bytes=int(limit) if limit is not None else None,
    )


class KubeletServer:
    def __init__(
        self, port: int, find_log: LogFinder, *, serving_cert: Path, serving_key: Path, client_ca: Path
    ) -> None:
        self.find_log = find_log
        self._stopped = threading.Event()
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(serving_cert, serving_key)
        context.load_verify_locations(client_ca)
        context.verify_mode = ssl.CERT_REQUIRED
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: object) -> None:  # quiet
                return

            def do_GET(self) -> None:
                server.handle_get(self)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.httpd.daemon_threads = True
        self.httpd.socket = context.wrap_socket(self.httpd.socket, server_side=True)
        self.port = int(self.httpd.server_address[1])
        self._thread = threading.Thread(target=self.httpd.serve_forever, name="kubelet-server", daemon=True)

    def start(self) -> KubeletServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopped.set()
        self.httpd.shutdown()
        self.httpd.server_close()

    def handle_get(self, request: BaseHTTPRequestHandler) -> None:
        url = urlsplit(request.path)
        parts = [p for p in url.path.split("/") if p]
        if parts in (["healthz"], ["readyz"]):
            self._send_text(request, 200, "ok")
            return
        if len(parts) != 4 or parts[0] != "containerLogs":
            self._send_text(request, 404, f"404 page not found: {url.path}")
            return
        namespace, pod, container = parts[1:]
        log = self.find_log(namespace, pod, container)
        if log is None:
            self._send_text(request, 404, f'container "{container}" in pod "{pod}" is not available')
            return
        params = parse_qs(url.query)
        try:
            query = _query(params)
        except ValueError as exc:
            self._send_text(request, 400, f"invalid log query: {exc}")
            return
        follow = params.get("follow", ["false"])[0] == "true"
        request.send_response(200)
        request.send_header("Content-Type", "text/plain")
        request.send_header("Connection", "close")
        request.end_headers()
        budget = query.limit_bytes
        lines, offset = log.read_lines(query)
        try:
            for line in lines:
                budget = self._write(request, line, budget)
                if budget == 0:
                    return
            if follow:
                for line in log.follow(offset, LogQuery(timestamps=query.timestamps), self._stopped):
                    budget = self._write(request, line, budget)
                    if budget == 0:
                        return
        except (BrokenPipeError, ConnectionResetError, ssl.SSLError):
            return

    @staticmethod
    def _write(request: BaseHTTPRequestHandler, line: str, budget: int | None) -> int | None:
        data = (line + "\n").encode()
        if budget is not None:
            data = data[:budget]
            budget -= len(data)
        request.wfile.write(data)
        request.wfile.flush()
        return budget

    @staticmethod
    def _send_text(request: BaseHTTPRequestHandler, code: int, text: str) -> None:
        body = text.encode()
        request.send_response(code)
        request.send_header("Content-Type", "text/plain")
        request.send_header("Content-Length", str(len(body)))
        request.end_headers()
        request.wfile.write(body)
