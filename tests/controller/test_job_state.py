"""Job state roll-up: a table over task-state histograms, and properties."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from iris.cluster.controller.job_state import rollup_job_state
from iris.rpc.enums import TERMINAL_JOB_STATES, JobState, TaskState

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
