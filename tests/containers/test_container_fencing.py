"""The fencing journey on containers: a SIGSTOPped worker's container is dead before the
controller's retry of its task starts in a container on the other worker (no double run). The
order is read from the engine's own event log (``docker events``: die, then start)."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from tests.conftest import wait_until

from iris.client import Entrypoint, IrisClient, JobState, LocalCluster, ResourceSpec
from iris.testing import container_engine as engines
from iris.testing.images import BUSYBOX_IMAGE

pytestmark = pytest.mark.skipif(not engines.available(), reason="dockerd is not installed")


def _docker(*args: str) -> str:
    done = subprocess.run([engines.docker_cli(), *args], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout


def _running(job_id: str) -> list[tuple[str, str]]:
    """(attempt uid, worker) of the job's running containers."""
    out = _docker(
        "ps", "--filter", f"label=iris.job={job_id}",
        "--format", '{{.Label "iris.attempt"}}\t{{.Label "iris.worker"}}',
    )  # fmt: skip
    return [tuple(line.split("\t")) for line in out.splitlines() if line]  # type: ignore[misc]


def test_a_fenced_workers_container_dies_before_the_retry_starts(
    container_engine: engines.Engine, tmp_path: Path
) -> None:
    since = f"{time.time() - 1:.3f}"
    with LocalCluster(workers=2, state_dir=tmp_path / "state", worker_grace_s=6.0, tick_s=0.5) as lc:
        client = IrisClient(lc.url)
        job = client.submit(
            Entrypoint.from_command("sleep", "600"),
            name="fenced",
            resources=ResourceSpec(cpu=0.5, memory="64MB"),
            image=BUSYBOX_IMAGE,
        )
        [(first, worker)] = wait_until(lambda: _running(job.job_id), timeout=60, what="the first container")
        victim = next(w for w in lc.workers if w.name == worker)
        os.kill(victim.proc.pid, signal.SIGSTOP)
        try:
            [(retry, other)] = wait_until(
                lambda: [r for r in _running(job.job_id) if r[0] != first],
                timeout=90,
                what="the retry's container on the other worker",
            )
        finally:
            os.kill(victim.proc.pid, signal.SIGCONT)
        assert other != worker
        assert job.kill() is JobState.KILLED
        wait_until(lambda: not _running(job.job_id), timeout=60, what="no container left")
        client.close()
    events = _docker(
        "events", "--since", since, "--until", f"{time.time():.3f}",
        "--filter", f"label=iris.job={job.job_id}", "--filter", "type=container",
        "--format", '{{.TimeNano}} {{.Action}} {{index .Actor.Attributes "iris.attempt"}}',
    )  # fmt: skip
    at = {}
    for line in events.splitlines():
        nanos, action, uid = line.split()
        at.setdefault((action, uid), int(nanos))
    assert ("die", first) in at and ("start", retry) in at, events
    assert at[("die", first)] < at[("start", retry)], events
