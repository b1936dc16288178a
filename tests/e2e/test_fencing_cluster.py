"""A real controller and two real workers: a SIGSTOPped worker's attempt is dead before the
controller's retry of its task starts on the other worker (no double run)."""

from __future__ import annotations

import os
import signal
from pathlib import Path

from tests.e2e.retry_watch import start_stamped_job, watch_retry

from iris.client import JobState, LocalCluster


def test_stopped_workers_attempt_dies_before_the_retry_starts(tmp_path: Path) -> None:
    stamps = tmp_path / "stamps"
    with LocalCluster(workers=2, state_dir=tmp_path / "state", worker_grace_s=6.0, tick_s=0.5) as lc:
        job, first_pid, first_worker = start_stamped_job(lc.url, stamps, "fenced")
        victim = next(w for w in lc.workers if w.name == first_worker)
        os.kill(victim.proc.pid, signal.SIGSTOP)
        try:
            retry = watch_retry(stamps, first_pid)
            assert retry.first_died_at is not None, (
                "the first attempt was still running when its retry started"
            )
            assert retry.first_died_at < retry.started_at
        finally:
            os.kill(victim.proc.pid, signal.SIGCONT)
        assert job.kill() is JobState.KILLED
