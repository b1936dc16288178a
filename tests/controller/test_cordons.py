"""Cordoned, draining and quarantined workers take no new work (deterministic rounds, fake clock)."""

from __future__ import annotations

from pathlib import Path

from iris.cluster.controller.cordons import QuarantineWindow, infrastructure_failure
from iris.rpc.enums import JobState, TaskState
from iris.testing.round_harness import RoundHarness


def _worker_of(h: RoundHarness, job_id: str) -> str | None:
    return h.task(job_id).attempts[-1][2] if h.task(job_id).attempts else None


def test_a_cordoned_worker_takes_no_new_work_and_uncordon_brings_it_back(tmp_path: Path) -> None:
    h = RoundHarness(workers=2, cpu=1, state_dir=tmp_path)
    h.controller.cordon_worker("w0", "cordon", "bad fan")
    jobs = [h.submit(f"j{i}") for i in range(2)]
    h.step(3)
    assert [_worker_of(h, j) for j in jobs].count("w1") == 1
    waiting = next(j for j in jobs if _worker_of(h, j) is None)  # w0 is free, but cordoned
    assert h.task(waiting).state is TaskState.PENDING
    h.restart()  # the cordon is stored, not only in memory
    assert h.controller.cordons["w0"].reason == "bad fan"
    h.step(2)
    assert _worker_of(h, waiting) is None
    assert h.controller.uncordon_worker("w0")
    h.step(2)
    assert _worker_of(h, waiting) == "w0"


def test_a_drained_worker_finishes_its_tasks_then_moves_the_rest_after_the_grace() -> None:
    h = RoundHarness(workers=2, cpu=1)
    h.controller.drain_grace_s = 60.0
    first, second = h.submit("first"), h.submit("second")
    h.step(3)
    on_w0 = first if _worker_of(h, first) == "w0" else second
    h.controller.cordon_worker("w0", "drain", "kernel upgrade")
    h.step(3, seconds=5)
    assert h.task(on_w0).state is TaskState.RUNNING and _worker_of(h, on_w0) == "w0"  # runs on
    third = h.submit("third")
    h.step(3, seconds=5)
    assert h.task(third).state is TaskState.PENDING  # no new work on w0 (w1 is full)
    h.step(2, seconds=60)  # past the grace: the task is preempted and retried elsewhere
    attempts = h.task(on_w0).attempts
    assert attempts[0][1] is TaskState.PREEMPTED and attempts[0][2] == "w0"
    assert h.task(on_w0).state in (TaskState.PENDING, TaskState.ASSIGNED)


def test_infrastructure_failures_of_three_jobs_quarantine_a_worker() -> None:
    h = RoundHarness(workers=2, cpu=4)
    h.controller.cordon_worker("w1", "cordon", "keep the work on w0")
    jobs = [h.submit(f"j{i}") for i in range(4)]
    h.step(2)
    assert all(_worker_of(h, j) == "w0" for j in jobs)
    h.controller.uncordon_worker("w1")
    # A task's own failure (exit code 1) is not the machine's fault.
    h.fleet.finish(h.current_uid(jobs[3]), exit_code=1, error="exited with code 1")
    h.step(1)
    for job in jobs[:2]:
        h.fleet.finish(
            h.current_uid(job), exit_code=1, error="could not build the environment: no space left on device"
        )
    h.step(2)
    assert "w0" not in h.controller.cordons
    h.fleet.finish(h.current_uid(jobs[2]), exit_code=1, error="could not unpack bundle b: Input/output error")
    h.step(2)
    cordon = h.controller.cordons["w0"]
    assert cordon.automatic and "3 jobs" in cordon.reason and "Input/output error" in cordon.reason
    after = h.submit("after")
    h.step(2)
    assert _worker_of(h, after) == "w1"
    assert h.controller.uncordon_worker("w0") and "w0" not in h.controller.cordons
    assert h.job_state(jobs[3]) is JobState.FAILED


def test_infrastructure_failure_kinds() -> None:
    assert infrastructure_failure(TaskState.FAILED, "exited with code 1") is None
    assert (
        infrastructure_failure(TaskState.FAILED, "could not start the process: No such file or directory")
        is None
    )
    assert infrastructure_failure(TaskState.FAILED, "could not fetch bundle x from y: HTTP 500")
    assert infrastructure_failure(TaskState.FAILED, "CUDA error: an illegal memory access (Xid 79)")
    assert infrastructure_failure(TaskState.WORKER_FAILED, None) == "worker failure"
    assert infrastructure_failure(TaskState.SUCCEEDED, "could not") is None
    window = QuarantineWindow(threshold=2, window_s=10)
    assert window.record("w", "/a/x", "disk", 0.0) is None
    assert window.record("w", "/a/x", "disk", 1.0) is None  # the same job twice counts once
    assert window.record("w", "/a/y", "disk", 20.0) is None  # the first ones fell out of the window
    assert window.record("w", "/a/z", "disk", 21.0) is not None
