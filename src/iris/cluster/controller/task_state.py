"""The task state machine as pure functions: an observation in, updated snapshots out.

Rules (docs/state-machine.md): observations of a stale attempt never move its task; terminal
attempts never revive; application failures spend ``max_retries_failure``; infrastructure loss
and preemption spend ``max_retries_preemption``; losing an attempt that never started is free.
A controller-side stop (kill, preemption, timeout) marks the attempt terminal at once with a
``stop_reason``; the worker's later observations only confirm that its process is gone
(``released``), and only then are its resources reused.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from iris.rpc.enums import ACTIVE_TASK_STATES, TERMINAL_TASK_STATES, StopReason, TaskState
from iris.rpc.models import AttemptObservation


class TaskSnapshot(NamedTuple):
    """A task row as read (immutable; ``_replace`` makes the next one). A named tuple, not a
    dataclass: a round builds, copies and compares several per task, at a fraction of the cost."""

    task_id: str
    state: TaskState
    current_attempt_uid: str | None
    failure_count: int = 0
    preemption_count: int = 0
    max_retries_failure: int = 0
    max_retries_preemption: int = 100
    started_at: float | None = None
    finished_at: float | None = None
    exit_code: int | None = None
    error: str | None = None
    # The row's version when read: a write of this snapshot applies only over that version.
    version: int = 0


class AttemptSnapshot(NamedTuple):
    """An attempt row as read (immutable, like ``TaskSnapshot``)."""

    attempt_uid: str
    task_id: str
    state: TaskState
    released: bool = False
    stop_reason: StopReason | None = None
    started_at: float | None = None
    finished_at: float | None = None
    exit_code: int | None = None
    error: str | None = None
    worker_id: str | None = None
    version: int = 0


@dataclass(frozen=True, slots=True)
class Transition:
    task: TaskSnapshot
    attempt: AttemptSnapshot
    # True when this observation ended the current attempt with an application failure.
    failed_attempt: bool = False


STOP_OUTCOME: dict[StopReason, TaskState] = {
    StopReason.CANCELLED: TaskState.KILLED,
    StopReason.JOB_TERMINATED: TaskState.KILLED,
    StopReason.SUPERSEDED: TaskState.KILLED,
    StopReason.PREEMPTED: TaskState.PREEMPTED,
    StopReason.TASK_TIMEOUT: TaskState.FAILED,
    StopReason.WORKER_DRAIN: TaskState.WORKER_FAILED,
}


def retry_or_terminal(
    task: TaskSnapshot, outcome: TaskState, *, never_started: bool, now: float
) -> TaskSnapshot:
    """Charge the right budget for a lost or failed attempt and decide PENDING vs terminal."""
    if outcome is TaskState.FAILED:
        count = task.failure_count + 1
        if count <= task.max_retries_failure:
            return task._replace(state=TaskState.PENDING, failure_count=count)
        return task._replace(state=TaskState.FAILED, failure_count=count, finished_at=now)
    if outcome in (TaskState.WORKER_FAILED, TaskState.PREEMPTED):
        if never_started:
            return task._replace(state=TaskState.PENDING)
        count = task.preemption_count + 1
        if count <= task.max_retries_preemption:
            return task._replace(state=TaskState.PENDING, preemption_count=count)
        return task._replace(state=outcome, preemption_count=count, finished_at=now)
    return task._replace(
        state=outcome, finished_at=now if outcome in TERMINAL_TASK_STATES else task.finished_at
    )


def apply_observation(
    task: TaskSnapshot, attempt: AttemptSnapshot, obs: AttemptObservation, now: float
) -> Transition:
    """Fold one worker (or pod) observation of ``attempt`` into the attempt and its task."""
    released = attempt.released or obs.runtime_released
    state = obs.state
    error = obs.error
    if state is TaskState.MISSING:
        released = True  # the runtime has no record of it: nothing runs
        if attempt.state not in TERMINAL_TASK_STATES:
            state = TaskState.WORKER_FAILED
            error = error or "the worker lost this attempt (it has no record of it)"

    if attempt.state in TERMINAL_TASK_STATES:
        # Terminal attempts never revive; a late report only confirms the process is gone.
        finished = attempt.finished_at
        if finished is None and (released or state in TERMINAL_TASK_STATES):
            finished = obs.finished_at or now
        return Transition(task=task, attempt=attempt._replace(released=released, finished_at=finished))

    if state in (TaskState.PENDING, TaskState.ASSIGNED):
        return Transition(task=task, attempt=attempt._replace(released=released))
    if state is TaskState.KILLED:
        state = TaskState.WORKER_FAILED  # killed without being asked: infrastructure took it
        error = error or "the attempt was killed by its runtime"
    if state is TaskState.BUILDING and attempt.state is TaskState.RUNNING:
        state = TaskState.RUNNING
    terminal = state in TERMINAL_TASK_STATES
    started_at = attempt.started_at or obs.started_at
    if started_at is None and state is TaskState.RUNNING:
        started_at = now
    new_attempt = attempt._replace(
        state=state,
        released=released,
        started_at=started_at,
        finished_at=(obs.finished_at or now) if terminal else None,
        exit_code=obs.exit_code if terminal else attempt.exit_code,
        error=error if terminal else attempt.error,
    )

    if task.current_attempt_uid != attempt.attempt_uid or task.state not in ACTIVE_TASK_STATES:
        return Transition(task=task, attempt=new_attempt)

    if not terminal:
        task_started = task.started_at or (started_at if state is TaskState.RUNNING else None)
        return Transition(task=task._replace(state=state, started_at=task_started), attempt=new_attempt)
    task = task._replace(started_at=task.started_at or started_at)  # a quick task may never be seen RUNNING
    if state is TaskState.SUCCEEDED:
        done = task._replace(
            state=TaskState.SUCCEEDED, exit_code=obs.exit_code or 0, error=None, finished_at=now
        )
        return Transition(task=done, attempt=new_attempt)

    outcome = state if state in (TaskState.FAILED, TaskState.PREEMPTED) else TaskState.WORKER_FAILED
    never_started = outcome is not TaskState.FAILED and attempt.state is TaskState.ASSIGNED
    new_task = retry_or_terminal(task, outcome, never_started=never_started, now=now)
    new_task = new_task._replace(exit_code=obs.exit_code, error=error or obs.message)
    return Transition(task=new_task, attempt=new_attempt, failed_attempt=outcome is TaskState.FAILED)


def stop_attempt(task: TaskSnapshot, attempt: AttemptSnapshot, reason: StopReason, now: float) -> Transition:
    """A controller-side decision to stop an attempt: the attempt ends now, its task moves on.

    The attempt stays unreleased until the runtime confirms the process is gone.
    """
    if attempt.state in TERMINAL_TASK_STATES:
        return Transition(task=task, attempt=attempt)
    outcome = STOP_OUTCOME[reason]
    error = {
        StopReason.TASK_TIMEOUT: "timed out",
        StopReason.PREEMPTED: "preempted by a higher-priority task",
        StopReason.CANCELLED: "killed by request",
        StopReason.JOB_TERMINATED: "its job terminated",
        StopReason.SUPERSEDED: "superseded by a newer attempt",
        StopReason.WORKER_DRAIN: "its worker is draining",
    }[reason]
    new_attempt = attempt._replace(state=outcome, stop_reason=reason, error=attempt.error or error)
    return Transition(task=task, attempt=new_attempt)
