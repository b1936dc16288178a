"""The task state machine, row by row, plus properties that must hold for any observation."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from iris.cluster.controller.task_state import (
    AttemptSnapshot,
    TaskSnapshot,
    apply_observation,
    stop_attempt,
)
from iris.rpc.enums import TERMINAL_TASK_STATES, StopReason, TaskState
from iris.rpc.models import AttemptObservation

S = TaskState
NOW = 1000.0


def obs(**kw: object) -> AttemptObservation:
    return AttemptObservation(attempt_uid="a1", **kw)  # type: ignore[arg-type]


def task(state: S = S.RUNNING, **kw: object) -> TaskSnapshot:
    return TaskSnapshot(task_id="/u/j/0", state=state, current_attempt_uid="a1", **kw)  # type: ignore[arg-type]


def attempt(state: S = S.RUNNING, uid: str = "a1", **kw: object) -> AttemptSnapshot:
    return AttemptSnapshot(attempt_uid=uid, task_id="/u/j/0", state=state, **kw)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("task_state", "attempt_state", "observed", "budgets", "want_task", "want_attempt"),
    [
        # progress
        (S.ASSIGNED, S.ASSIGNED, S.BUILDING, {}, S.BUILDING, S.BUILDING),
        (S.ASSIGNED, S.ASSIGNED, S.RUNNING, {}, S.RUNNING, S.RUNNING),
        (S.RUNNING, S.RUNNING, S.BUILDING, {}, S.RUNNING, S.RUNNING),  # never regresses
        (S.RUNNING, S.RUNNING, S.SUCCEEDED, {}, S.SUCCEEDED, S.SUCCEEDED),
        # application failure: the failure budget
        (S.RUNNING, S.RUNNING, S.FAILED, {}, S.FAILED, S.FAILED),
        (S.RUNNING, S.RUNNING, S.FAILED, {"max_retries_failure": 1}, S.PENDING, S.FAILED),
        (S.RUNNING, S.RUNNING, S.FAILED, {"max_retries_failure": 1, "failure_count": 1}, S.FAILED, S.FAILED),
        # infrastructure loss: the preemption budget
        (S.RUNNING, S.RUNNING, S.WORKER_FAILED, {}, S.PENDING, S.WORKER_FAILED),
        (
            S.RUNNING,
            S.RUNNING,
            S.WORKER_FAILED,
            {"max_retries_preemption": 0},
            S.WORKER_FAILED,
            S.WORKER_FAILED,
        ),
        (S.RUNNING, S.RUNNING, S.MISSING, {}, S.PENDING, S.WORKER_FAILED),
        (S.RUNNING, S.RUNNING, S.KILLED, {}, S.PENDING, S.WORKER_FAILED),  # killed without being asked
        # losing an attempt that never started is free, even with no budget left
        (S.ASSIGNED, S.ASSIGNED, S.WORKER_FAILED, {"max_retries_preemption": 0}, S.PENDING, S.WORKER_FAILED),
        (S.ASSIGNED, S.ASSIGNED, S.MISSING, {"max_retries_preemption": 0}, S.PENDING, S.WORKER_FAILED),
        # reports that say nothing new
        (S.ASSIGNED, S.ASSIGNED, S.PENDING, {}, S.ASSIGNED, S.ASSIGNED),
        (S.ASSIGNED, S.ASSIGNED, S.ASSIGNED, {}, S.ASSIGNED, S.ASSIGNED),
    ],
)
def test_transition_table(
    task_state: S, attempt_state: S, observed: S, budgets: dict[str, int], want_task: S, want_attempt: S
) -> None:
    tr = apply_observation(task(task_state, **budgets), attempt(attempt_state), obs(state=observed), NOW)
    assert tr.task.state is want_task
    assert tr.attempt.state is want_attempt


def test_preemption_budget_is_charged_only_when_started() -> None:
    started = apply_observation(task(S.RUNNING), attempt(S.RUNNING), obs(state=S.WORKER_FAILED), NOW)
    assert started.task.preemption_count == 1
    never = apply_observation(task(S.ASSIGNED), attempt(S.ASSIGNED), obs(state=S.WORKER_FAILED), NOW)
    assert never.task.preemption_count == 0


def test_failure_records_exit_code_and_error() -> None:
    tr = apply_observation(task(), attempt(), obs(state=S.FAILED, exit_code=3, error="exit code 3"), NOW)
    assert (tr.task.exit_code, tr.task.error, tr.attempt.exit_code) == (3, "exit code 3", 3)
    assert tr.failed_attempt


def test_stale_attempt_never_moves_the_task() -> None:
    current = task(S.RUNNING)
    stale = attempt(S.RUNNING, uid="old")
    tr = apply_observation(current, stale, obs(state=S.SUCCEEDED), NOW)
    assert tr.task == current
    assert tr.attempt.state is S.SUCCEEDED


def test_terminal_attempt_never_revives_but_confirms_release() -> None:
    killed = attempt(S.KILLED, stop_reason=StopReason.CANCELLED)
    tr = apply_observation(task(S.KILLED), killed, obs(state=S.RUNNING), NOW)
    assert tr.attempt.state is S.KILLED and not tr.attempt.released
    tr = apply_observation(task(S.KILLED), killed, obs(state=S.KILLED, runtime_released=True), NOW)
    assert tr.attempt.released and tr.attempt.finished_at == NOW


def test_stop_marks_attempt_terminal_but_unreleased() -> None:
    for reason, outcome in [
        (StopReason.CANCELLED, S.KILLED),
        (StopReason.PREEMPTED, S.PREEMPTED),
        (StopReason.TASK_TIMEOUT, S.FAILED),
    ]:
        tr = stop_attempt(task(), attempt(), reason, NOW)
        assert tr.attempt.state is outcome
        assert tr.attempt.stop_reason is reason
        assert not tr.attempt.released


states = st.sampled_from([s for s in TaskState])


@given(
    task_state=states.filter(lambda s: s is not S.MISSING),
    attempt_state=states.filter(lambda s: s is not S.MISSING),
    observed=states,
    current=st.booleans(),
    released=st.booleans(),
    failures=st.integers(0, 3),
    max_failures=st.integers(0, 3),
)
def test_properties(
    task_state: S,
    attempt_state: S,
    observed: S,
    current: bool,
    released: bool,
    failures: int,
    max_failures: int,
) -> None:
    t = TaskSnapshot(
        task_id="/u/j/0",
        state=task_state,
        current_attempt_uid="a1" if current else "other",
        failure_count=failures,
        max_retries_failure=max_failures,
    )
    a = attempt(attempt_state, released=released)
    tr = apply_observation(t, a, obs(state=observed), NOW)
    # A finished task is never reopened.
    if task_state in TERMINAL_TASK_STATES:
        assert tr.task == t
    # A terminal attempt never changes state.
    if attempt_state in TERMINAL_TASK_STATES:
        assert tr.attempt.state is attempt_state
    # Release is monotonic, and MISSING always releases.
    assert tr.attempt.released >= released
    if observed is S.MISSING:
        assert tr.attempt.released
    # Only the current attempt moves its task.
    if not current:
        assert tr.task == t
    # MISSING is a protocol sentinel, never stored.
    assert tr.task.state is not S.MISSING and tr.attempt.state is not S.MISSING
    # Budgets only grow, by at most one charge per observation; a retry stays within the budget.
    assert failures <= tr.task.failure_count <= failures + 1
    if tr.task.state is S.PENDING and tr.task.failure_count > failures:
        assert tr.task.failure_count <= max_failures


def test_replace_keeps_snapshots_plain() -> None:
    t = task()
    assert t._replace(state=S.PENDING).state is S.PENDING
