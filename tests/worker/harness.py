"""A recording controller stub (the only stand-in) and a real worker daemon subprocess for tests."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import uvicorn
from fastapi import FastAPI
from fastapi.responses import JSONResponse
from tests.conftest import TEST_WORKER_ID

from iris.rpc.models import (
    DesiredAttempt,
    ReconcileRequest,
    ReconcileResponse,
    RegisterRequest,
    RegisterResponse,
)
from iris.rpc.signing import sign_request, worker_secret

# The stub controller's signing key: every worker it registers gets worker_secret(key, address).
STUB_MASTER_KEY = b"\x07" * 32


class SignedByController(httpx.Auth):
    """Signs each request as the controller does (iris.rpc.signing)."""

    requires_request_body = True

    def __init__(self, secret: bytes) -> None:
        self.secret = secret

    def auth_flow(self, request: httpx.Request):  # noqa: ANN201 - httpx's generator protocol
        request.headers.update(
            sign_request(self.secret, request.method, request.url.raw_path.decode(), request.content)
        )
        yield request


def wait_until(
    predicate: Callable[[], object], timeout: float = 10.0, interval: float = 0.02, what: str = ""
) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what or predicate}")
        time.sleep(interval)


@dataclass
class ControllerStub:
    """Answers register and nudge like a controller, and records every call. Restartable on one port."""

    port: int = 0
    registrations: list[RegisterRequest] = field(default_factory=list)
    nudges: list[tuple[str, float]] = field(default_factory=list)
    # A slow controller: each nudge answer waits this long (to observe coalescing).
    nudge_delay_s: float = 0.0
    # The fencing grace this controller advises its workers.
    fence_after_s: float | None = None
    # A slow first answer: each registration waits this long (longer than a short fencing grace).
    register_delay_s: float = 0.0
    max_concurrent_nudges: int = 0

    def __post_init__(self) -> None:
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> ControllerStub:
        known: set[str | None] = set()
        app = FastAPI()

        @app.post("/api/v1/workers/register")
        def register(request: RegisterRequest) -> RegisterResponse:
            time.sleep(self.register_delay_s)
            self.registrations.append(request)
            known.add(request.worker_id)
            return RegisterResponse(
                worker_id=request.worker_id or "assigned",
                rpc_secret=worker_secret(STUB_MASTER_KEY, request.address).hex(),
                fence_after_s=self.fence_after_s,
            )

        in_flight = [0]
        lock = threading.Lock()

        @app.post("/api/v1/workers/{worker_id}/nudge")
        def nudge(worker_id: str) -> JSONResponse:
            with lock:
                in_flight[0] += 1
                self.max_concurrent_nudges = max(self.max_concurrent_nudges, in_flight[0])
            time.sleep(self.nudge_delay_s)
            with lock:
                in_flight[0] -= 1
            self.nudges.append((worker_id, time.time()))
            if worker_id not in known:
                return JSONResponse(
                    {"error": {"code": "not_found", "message": "unknown worker"}}, status_code=404
                )
            return JSONResponse({}, status_code=202)

        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", self.port))
        self.port = sock.getsockname()[1]
        self._server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off"))
        self._thread = threading.Thread(target=self._server.run, kwargs={"sockets": [sock]}, daemon=True)
        self._thread.start()
        wait_until(lambda: self._server.started, what="controller stub to serve")
        return self

    def stop(self) -> None:
        assert self._server is not None and self._thread is not None
        self._server.should_exit = True
        self._thread.join(timeout=10)

    def nudges_from(self, worker_id: str, since: float = 0.0) -> int:
        return sum(1 for wid, at in self.nudges if wid == worker_id and at >= since)


@dataclass
class WorkerProcess:
    popen: subprocess.Popen[str]
    worker_id: str
    address: str
    state_dir: Path
    stderr_path: Path

    def __post_init__(self) -> None:
        self.secret = worker_secret(STUB_MASTER_KEY, self.address)
        self.http = httpx.Client(
            base_url=f"http://{self.address}", timeout=10, auth=SignedByController(self.secret)
        )
        # The same worker, reached by anyone else on the machine: no signature.
        self.stranger = httpx.Client(base_url=f"http://{self.address}", timeout=10)

    def reconcile(
        self, attempts: list[DesiredAttempt], worker_id: str | None = None, *, renew_lease: bool = True
    ) -> ReconcileResponse:
        request = ReconcileRequest(
            worker_id=worker_id or self.worker_id, attempts=attempts, renew_lease=renew_lease
        )
        answer = self.http.post(
            "/reconcile", content=request.model_dump_json(), headers={"content-type": "application/json"}
        )
        answer.raise_for_status()
        return ReconcileResponse.model_validate_json(answer.content)

    def observe(self, attempts: list[DesiredAttempt], uid: str):
        return {o.attempt_uid: o for o in self.reconcile(attempts).observations}[uid]

    def stop(self) -> int:
        if self.popen.poll() is None:
            self.popen.send_signal(signal.SIGTERM)
        try:
            return self.popen.wait(timeout=15)
        finally:
            self.http.close()
            self.stranger.close()

    def stderr(self) -> str:
        return self.stderr_path.read_text()


MODULE_ENTRY = [sys.executable, "-m", "iris.cluster.worker"]
CLICK_ENTRY = [sys.executable, "-c", "from iris.cli.worker_cmd import worker; worker()", "start"]


def start_worker(
    tmp_path: Path,
    controller_url: str,
    *extra: str,
    worker_id: str = TEST_WORKER_ID,
    entry: list[str] = MODULE_ENTRY,
    wait_registered: bool = True,
) -> WorkerProcess:
    """Start a worker daemon; with ``wait_registered`` return once it obeys the stub's signature."""
    ready = tmp_path / f"{worker_id}.ready"
    state_dir = tmp_path / f"{worker_id}-state"
    stderr_path = tmp_path / f"{worker_id}.stderr"
    argv = [
        *entry,
        "--controller",
        controller_url,
        "--worker-id",
        worker_id,
        "--state-dir",
        str(state_dir),
        "--ready-file",
        str(ready),
        *extra,
    ]
    ready.unlink(missing_ok=True)
    with open(stderr_path, "w") as err:
        popen = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=err, text=True, env=dict(os.environ))

    def is_ready() -> bool:
        assert popen.poll() is None, f"worker exited early: {stderr_path.read_text()}"
        return ready.exists()

    wait_until(is_ready, timeout=30, what="worker ready file")
    info = json.loads(ready.read_text())
    assert info["worker_id"] == worker_id
    proc = WorkerProcess(popen, worker_id, info["address"], state_dir, stderr_path)
    if wait_registered:
        # Until it has registered the worker knows no secret and refuses every call with 401.
        wait_until(
            lambda: proc.http.get("/attempts/none/status").status_code == 404,
            timeout=30,
            what="worker to register and accept signed calls",
        )
    return proc
