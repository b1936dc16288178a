"""Job state roll-up: a table over task-state histograms, and properties."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from iris.cluster.controller.job_state import rollup_job_state
from iris.cluster.controller.round_kernel import settle_by_counts, settle_job
from iris.cluster.controller.snapshots import JobRollup, JobRow, JobSnapshot
from iris.cluster.controller.task_state import TaskSnapshot
from iris.rpc.enums import TERMINAL_JOB_STATES, JobState, PriorityBand, TaskState

S, J = TaskState, JobState


@pytest.mark.parametrize(
    ("counts", "max_failures", "started", "want"),
    [
        ({S.PENDING: 3}, 0, False, J.PENDING),
        ({S.PENDING: 2, S.ASSIGNED: 1}, 0, False, J.PENDING),  # placed, not started yet
        ({S.PENDING: 2, S.BUILDING: 1}, 0, False, J.RUNNING),
        ({S.PENDING: 3}, 0, True, J.RUNNING),  # a retried job stays RUNNING
        ({S.SUCCEEDED: 3}, 0, True, J.SUCCEEDED),
        ({S.SUCCEEDED: 2, S.FAILED: 1}, 0, True, J.FAILED),
        ({S.RUNNING: 2, S.FAILED: 1}, 1, True, J.RUNNING),  # within max_task_failures
        ({S.SUCCEEDED: 2, S.FAILED: 1}, 1, True, J.FAILED),  # all done, one failed
        ({S.RUNNING: 1, S.FAILED: 2}, 1, True, J.FAILED),
        ({S.PENDING: 1, S.UNSCHEDULABLE: 1}, 0, False, J.UNSCHEDULABLE),
        ({S.RUNNING: 1, S.KILLED: 1}, 0, True, J.KILLED),
        ({S.SUCCEEDED: 1, S.WORKER_FAILED: 1}, 0, True, J.WORKER_FAILED),
        ({S.SUCCEEDED: 1, S.PREEMPTED: 1}, 0, True, J.WORKER_FAILED),
        ({S.RUNNING: 1, S.WORKER_FAILED: 1}, 0, True, J.RUNNING),
    ],
)
def test_rollup_table(counts: dict[S, int], max_failures: int, started: bool, want: J) -> None:
    assert rollup_job_state(J.PENDING, counts, max_task_failures=max_failures, ever_started=started) is want


@given(
    current=st.sampled_from(list(JobState)),
    counts=st.dictionaries(st.sampled_from([s for s in TaskState if s is not S.MISSING]), st.integers(0, 5)),
    max_failures=st.integers(0, 3),
    started=st.booleans(),
)
def test_terminal_jobs_never_change_and_success_needs_all(
    current: J, counts: dict[S, int], max_failures: int, started: bool
) -> None:
    new = rollup_job_state(current, counts, max_task_failures=max_failures, ever_started=started)
    if current in TERMINAL_JOB_STATES:
        assert new is current
    if new is J.SUCCEEDED and current is not J.SUCCEEDED:
        assert sum(counts.values()) == counts.get(S.SUCCEEDED, 0) > 0


@given(
    tasks=st.integers(1, 20),
    started=st.floats(0, 1000),
    running=st.booleans(),
    task_starts=st.booleans(),
)
def test_a_succeeded_job_settles_by_counts_as_its_full_snapshot_would(
    tasks: int, started: float, running: bool, task_starts: bool
) -> None:
    """The count-only settle of a job whose tasks all succeeded makes exactly the change the full
    snapshot's settle makes (the full read is skipped for it), whether or not the job was ever
    seen running and whether or not its quick tasks were."""
    job = JobRow(
        job_id="/u/j", name="j", user="u", parent_job_id=None, root_job_id="/u", depth=1,
        state=J.RUNNING if running else J.PENDING, priority=PriorityBand.INTERACTIVE, replicas=tasks,
        spec_json="{}", submitted_at=0.0, root_submitted_at=0.0, started_at=started if running else None,
        finished_at=None, scheduling_deadline=None, error=None, exit_code=None, pending_reason=None,
    )  # fmt: skip
    starts = [started + i if task_starts else None for i in range(tasks)]
    done = tuple(
        TaskSnapshot(f"/u/j/{i}", S.SUCCEEDED, f"a{i}", started_at=starts[i], finished_at=2000.0, exit_code=0)
        for i in range(tasks)
    )  # fmt: skip
    first = min((s for s in starts if s is not None), default=None)  # what the store reads for it
    now = 3000.0
    by_counts, full = settle_by_counts([JobRollup(job, {S.SUCCEEDED: tasks}, 0, False, first)], now)
    assert full == []
    (change,) = by_counts.changes
    assert change == settle_job(JobSnapshot(job, done, {}, 0, False), now)
    assert [w.state for w in change.writes] == [J.SUCCEEDED]
