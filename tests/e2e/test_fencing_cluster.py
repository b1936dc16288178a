"""A real controller and two real workers: a SIGSTOPped worker's attempt is dead before the
controller's retry of its task starts on the other worker (no double run)."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

from tests.conftest import wait_until

from iris.client import Entrypoint, IrisClient, JobState, LocalCluster, ResourceSpec


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError):
        return False


def test_stopped_workers_attempt_dies_before_the_retry_starts(tmp_path: Path) -> None:
    stamps = tmp_path / "stamps"
    stamps.touch(mode=0o666)
    os.chmod(tmp_path, 0o777)
    script = f'echo "$$ $(date +%s.%N) $IRIS_WORKER_ID" >> {stamps}; exec sleep 600'
    with LocalCluster(workers=2, state_dir=tmp_path / "state", worker_grace_s=6.0, tick_s=0.5) as lc:
        client = IrisClient(lc.url)
        job = client.submit(
            Entrypoint.from_command("sh", "-c", script),
            name="fenced",
            resources=ResourceSpec(cpu=0.5, memory="64MB"),
        )
        wait_until(lambda: stamps.read_text().strip(), timeout=60, what="the first attempt to start")
        first_pid, _, first_worker = stamps.read_text().split()
        victim = next(w for w in lc.workers if w.name == first_worker)
        os.kill(victim.proc.pid, signal.SIGSTOP)
        try:
            died_at = None
            deadline = time.monotonic() + 90
            while len(stamps.read_text().split("\n")) < 3:  # a second line: the retry started
                if died_at is None and not alive(int(first_pid)):
                    died_at = time.time()
                if time.monotonic() > deadline:
                    raise AssertionError("the task was not retried on the other worker")
                time.sleep(0.02)
            second_started = float(stamps.read_text().split("\n")[1].split()[1])
            assert died_at is not None, "the first attempt was still running when its retry started"
            assert died_at < second_started
        finally:
            os.kill(victim.proc.pid, signal.SIGCONT)
        assert job.kill() is JobState.KILLED
