"""Logs outlive the machine, on every substrate: a task prints 10,000 lines and exits 1; then its
worker is killed (WORKER) or its pod deleted (KUBERNETES); the CLI still prints the tail, the
failure kind and the last lines, from the controller's log store."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator

import pytest
from tests.journeys.harness import WITH_CONTAINERS, Journey, substrate_cluster

from iris.client import Entrypoint, JobState, ResourceSpec

IRIS = [sys.executable, "-m", "iris.cli.main"]
SCRIPT = (
    "import sys, time\n"
    "blob = b'x' * (40 * 1024 * 1024)\n"
    "for i in range(10000):\n"
    "    print(f'line {i}')\n"
    "sys.stdout.flush()\n"
    "time.sleep(1.5)\n"  # holds its memory for a few usage samples
    "print('giving up', flush=True)\n"
    "sys.exit(1)\n"
)


@pytest.fixture(scope="module", params=WITH_CONTAINERS)
def j(request: pytest.FixtureRequest) -> Iterator[Journey]:
    with substrate_cluster(request, workers=1) as journey:
        yield journey


def iris(j: Journey, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "IRIS_CONTROLLER_URL": j.cluster.url}
    return subprocess.run([*IRIS, *args], capture_output=True, text=True, env=env, timeout=120)


def test_tail_status_and_summary_after_the_machine_is_gone(j: Journey) -> None:
    job = j.client.submit(
        Entrypoint.from_command(j.python, "-c", SCRIPT),
        name="chatty",
        resources=ResourceSpec(cpu=0.5, memory="512MB"),
    )
    detail = j.step(
        lambda: job.detail() if job.status() is JobState.FAILED else None, timeout=90, what="failed"
    )
    uid = detail.tasks[0].current_attempt_uid
    assert uid is not None

    def all_stored() -> bool:
        tail = job.query_logs(tail=1).lines
        return bool(tail) and tail[-1].line == "giving up"

    j.step(all_stored, timeout=30, what="the whole log in the controller's store")

    if j.backend == "worker":
        j.step(lambda: job.summary().tasks[0].peak_rss_bytes, timeout=20, what="usage reported")
        worker = j.cluster.workers[0]
        os.kill(worker.proc.pid, signal.SIGKILL)
        worker.proc.wait()
        j.step(lambda: not j.client.workers().workers, timeout=30, what="the dead worker reaped")
    else:
        assert j.kube is not None
        pods = [
            p["metadata"]["name"]
            for p in j.kube.pods()
            if p["metadata"]["labels"].get("iris.attempt_uid") == uid
        ]
        assert pods, "the task's pod is there before we delete it"
        j.kube.run("delete", "pod", pods[0], "--wait=true")
        j.step(
            lambda: not [p for p in j.kube.pods() if p["metadata"]["labels"].get("iris.attempt_uid") == uid],
            timeout=30,
            what="the pod gone",
        )

    logs = iris(j, "job", "logs", job.job_id, "--tail", "5")
    assert logs.returncode == 0, logs.stderr
    assert logs.stdout.splitlines() == ["line 9996", "line 9997", "line 9998", "line 9999", "giving up"]

    status = iris(j, "job", "status", job.job_id)
    assert status.returncode == 0, status.stderr
    assert "task 0 failed (exit code): exited with code 1" in status.stdout
    assert "last 20 log lines:" in status.stdout and "    giving up" in status.stdout

    summary = iris(j, "job", "summary", job.job_id)
    assert summary.returncode == 0, summary.stderr
    assert "PEAK MEM / LIMIT" in summary.stdout and "FAILED" in summary.stdout
    if j.backend == "worker":
        peak = job.summary().tasks[0].peak_rss_bytes
        assert peak is not None and peak > 40 * 1024 * 1024
        assert "/ 512MB" in summary.stdout
