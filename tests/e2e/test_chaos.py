"""Acceptance of the fencing work: a seeded mix of worker kills, SIGSTOPs and controller kills
over a batch of tasks on a real local cluster loses, reopens and double-runs nothing."""

from __future__ import annotations

from pathlib import Path

from iris.testing.chaos import run_chaos


def test_chaos_loses_nothing_and_never_runs_a_task_twice_at_once(tmp_path: Path) -> None:
    report = run_chaos(tmp_path, tasks=200, seed=13, fault_every_s=(2.0, 4.0))
    assert sum(report.faults.values()) >= 3, report.faults  # faults really happened
    assert report.lost == []
    # Behind network links the controller listens on every address: it must take no call without a token.
    assert report.open_call_status in (None, 401), report.open_call_status
    assert report.reopened == []
    assert report.overlaps == [], report.overlaps  # measured from the tasks' own stamps
