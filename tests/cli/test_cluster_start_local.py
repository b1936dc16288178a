"""`iris cluster start --local` as a person runs it: workers share the machine, a worker that dies
is restarted and the rest keeps running, a dead controller stops it with a non-zero exit."""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import psutil
import pytest
from tests.cli.helpers import IRIS, LineReader
from tests.conftest import wait_until

from iris.client import IrisClient, JobState
from iris.rpc.enums import WorkerStatus


class Started:
    def __init__(
        self,
        proc: subprocess.Popen[str],
        out: LineReader,
        err: LineReader,
        url: str,
        dashboard: str,
        token: str,
    ) -> None:
        self.proc, self.out, self.err, self.url = proc, out, err, url
        self.dashboard, self.token = dashboard, token

    def child(self, marker: str) -> psutil.Process:
        for p in psutil.Process(self.proc.pid).children(recursive=True):
            if marker in " ".join(p.cmdline()):
                return p
        raise AssertionError(f"no child process with {marker!r}")


@pytest.fixture
def started(tmp_path: Path) -> Iterator[Started]:
    proc = subprocess.Popen(
        [*IRIS, "cluster", "start", "--local", "--port", "0", "--workers", "2", "--state-dir", str(tmp_path / "s")],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True, cwd=tmp_path,
        env={**os.environ, "COLUMNS": "200"},
    )  # fmt: skip
    assert proc.stdout is not None and proc.stderr is not None
    out, err = LineReader(proc.stdout), LineReader(proc.stderr)
    url = out.wait_for("controller: ", timeout=180).split("controller: ")[1].strip()
    dashboard = out.wait_for("dashboard: ", timeout=180).split("dashboard: ")[1].strip()
    token = out.wait_for("export IRIS_TOKEN=", timeout=180).split("IRIS_TOKEN=")[1].strip()
    out.wait_for("Press Ctrl-C to stop.", timeout=180)
    try:
        yield Started(proc, out, err, url, dashboard, token)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(timeout=180)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def test_the_cluster_needs_its_one_time_token(started: Started) -> None:
    assert started.dashboard == f"{started.url}/?token={started.token}" and len(started.token) >= 24
    with httpx.Client(base_url=started.url, timeout=30) as http:
        refused = http.get("/api/v1/jobs")
        assert refused.status_code == 401 and "needs a token" in refused.json()["error"]["message"]
        allowed = http.get("/api/v1/jobs", headers={"Authorization": f"Bearer {started.token}"})
        assert allowed.status_code == 200
        assert http.get(started.dashboard).status_code == 200  # the page itself loads, then sends it


def test_workers_split_the_machine(started: Started) -> None:
    with IrisClient(started.url, token=started.token) as client:
        workers = client.workers().workers
    assert len(workers) == 2
    cpus = (os.cpu_count() or 1) * 1000
    memory = psutil.virtual_memory().total
    for w in workers:
        assert w.capacity.cpu_millicores == max(100, cpus // 2)
        assert abs(w.capacity.memory_bytes - memory // 2) <= 1
    assert sum(w.capacity.cpu_millicores for w in workers) <= max(200, cpus)


def test_a_killed_worker_is_restarted_and_the_cluster_keeps_running(started: Started) -> None:
    victim = started.child("--worker-id worker-0")
    victim.send_signal(signal.SIGKILL)
    started.err.wait_for("worker-0 exited with code -9; restarting it in 1s", timeout=180)
    started.err.wait_for("worker-0 restarted", timeout=180)
    assert started.proc.poll() is None, "the cluster keeps running"
    with IrisClient(started.url, token=started.token) as client:

        def both_healthy() -> bool:
            ws = client.workers().workers
            return len(ws) == 2 and all(w.status is WorkerStatus.HEALTHY for w in ws)

        wait_until(both_healthy, timeout=180, what="the restarted worker registers again")
        job = client.submit(name="after-restart", entrypoint=_echo(), replicas=2)
        assert job.wait(timeout=180).state is JobState.SUCCEEDED
    assert started.child("--worker-id worker-0").pid != victim.pid


def test_a_dead_controller_stops_the_cluster_with_exit_1(started: Started) -> None:
    started.child("iris.cluster.controller").send_signal(signal.SIGKILL)
    started.err.wait_for("the controller exited with code -9; stopping the cluster", timeout=180)
    assert started.proc.wait(timeout=180) == 1


def test_kill_9_of_the_cluster_stops_its_controller_and_workers(started: Started) -> None:
    children = [started.child("iris.cluster.controller"), started.child("--worker-id worker-0")]
    started.proc.kill()
    started.proc.wait()

    def gone(p: psutil.Process) -> bool:
        try:
            return p.status() == psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            return True

    wait_until(lambda: all(gone(p) for p in children), timeout=60, what="the cluster's processes to stop")


def _echo():
    from iris.client import Entrypoint

    return Entrypoint.from_command("echo", "ok")
