"""Shared by the fencing tests: watch a task's attempts start (from their own stamps) and when the
first one's process dies, until its retry starts."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

from tests.conftest import wait_until

from iris.client import Entrypoint, IrisClient, Job, ResourceSpec
from iris.testing.proc_state import running


def start_stamped_job(url: str, stamps: Path, name: str) -> tuple[Job, int, str]:
    """Submit a task that writes ``PID TIME WORKER`` to ``stamps`` at each start, then sleeps; wait
    for its first start and return (job, that attempt's pid, its worker)."""
    stamps.touch(mode=0o666)
    os.chmod(stamps.parent, 0o777)  # attempts run as uids of their own
    script = f'echo "$$ $(date +%s.%N) $IRIS_WORKER_ID" >> {stamps}; exec sleep 600'
    job = IrisClient(url).submit(
        Entrypoint.from_command("sh", "-c", script), name=name, resources=ResourceSpec(cpu=0.5, memory="64MB")
    )
    wait_until(lambda: stamps.read_text().strip(), timeout=60, what="the first attempt to start")
    pid, _, worker = stamps.read_text().split()
    return job, int(pid), worker


@dataclass(frozen=True)
class Retry:
    first_died_at: float | None  # None: the first attempt was still alive when the retry started
    started_at: float
    worker: str


def watch_retry(stamps: Path, first_pid: int, timeout_s: float = 90.0) -> Retry:
    """Poll until a second stamp (the retry) appears, noting when the first attempt's process died."""
    died_at = None
    deadline = time.monotonic() + timeout_s
    while len(stamps.read_text().split("\n")) < 3:  # a second line: the retry started
        if died_at is None and not running(first_pid):
            died_at = time.time()
        if time.monotonic() > deadline:
            raise AssertionError("the task was not retried on the other worker")
        time.sleep(0.02)
    _, started, worker = stamps.read_text().split("\n")[1].split()
    return Retry(died_at, float(started), worker)
