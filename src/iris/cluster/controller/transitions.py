"""Every task-state edge the controller may write, one line of why per edge.

``store.commit`` refuses a task write whose (before, after) pair is not listed here (a write
that keeps the state, e.g. recording ``started_at``, is not an edge). Terminal states have no
outgoing edge: a finished task never reopens; a retry is the same task going back to PENDING
from a live state, with a new attempt.
"""

from __future__ import annotations

from iris.rpc.enums import TERMINAL_TASK_STATES, TaskState

S = TaskState

TASK_TRANSITIONS: dict[tuple[TaskState, TaskState], str] = {
    (S.PENDING, S.ASSIGNED): "the scheduler (or Kueue dispatch) created an attempt for it",
    (S.PENDING, S.KILLED): "its job was stopped or finished before it was placed",
    (S.PENDING, S.UNSCHEDULABLE): "its job's scheduling deadline passed while it waited",
    (S.ASSIGNED, S.BUILDING): "its attempt began preparing (bundle, environment)",
    (S.ASSIGNED, S.RUNNING): "its attempt's process started",
    (S.ASSIGNED, S.SUCCEEDED): "a quick attempt finished before it was ever seen running",
    (S.ASSIGNED, S.FAILED): "its attempt failed at once and the failure budget is spent",
    (S.ASSIGNED, S.PENDING): "its attempt was lost, preempted or rejected before starting: retry",
    (S.ASSIGNED, S.KILLED): "its job was stopped or finished",
    (S.ASSIGNED, S.UNSCHEDULABLE): "placed but never started (a pod Kueue never admitted) by the deadline",
    (S.ASSIGNED, S.COSCHED_FAILED): "a member of its gang failed",
    (S.ASSIGNED, S.WORKER_FAILED): "its attempt was lost and the preemption budget is spent",
    (S.ASSIGNED, S.PREEMPTED): "preempted with the preemption budget spent",
    (S.BUILDING, S.RUNNING): "preparation finished and the process started",
    (S.BUILDING, S.SUCCEEDED): "the process finished before it was seen running",
    (S.BUILDING, S.FAILED): "preparation or the process failed, failure budget spent",
    (S.BUILDING, S.PENDING): "the attempt failed, was lost or preempted, with budget left: retry",
    (S.BUILDING, S.WORKER_FAILED): "its worker lost the attempt, preemption budget spent",
    (S.BUILDING, S.PREEMPTED): "preempted with the preemption budget spent",
    (S.BUILDING, S.KILLED): "its job was stopped or finished",
    (S.BUILDING, S.COSCHED_FAILED): "a member of its gang failed",
    (S.RUNNING, S.SUCCEEDED): "the process exited 0",
    (S.RUNNING, S.FAILED): "the process failed (or timed out), failure budget spent",
    (S.RUNNING, S.PENDING): "the attempt failed, was lost or preempted, with budget left: retry",
    (S.RUNNING, S.WORKER_FAILED): "its worker lost the attempt, preemption budget spent",
    (S.RUNNING, S.PREEMPTED): "preempted with the preemption budget spent",
    (S.RUNNING, S.KILLED): "its job was stopped or finished",
    (S.RUNNING, S.COSCHED_FAILED): "a member of its gang failed",
}


def edge_allowed(before: TaskState, after: TaskState) -> bool:
    """True for a listed edge, or for a write that keeps a live state (no edge)."""
    if before is after:
        return before not in TERMINAL_TASK_STATES
    return (before, after) in TASK_TRANSITIONS
