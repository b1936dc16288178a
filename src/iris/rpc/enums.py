"""Enumerations that travel on the wire and are stored in the database."""

from __future__ import annotations

from enum import StrEnum


class TaskState(StrEnum):
    PENDING = "PENDING"
    ASSIGNED = "ASSIGNED"
    BUILDING = "BUILDING"
    RUNNING = "RUNNING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    KILLED = "KILLED"
    WORKER_FAILED = "WORKER_FAILED"
    PREEMPTED = "PREEMPTED"
    UNSCHEDULABLE = "UNSCHEDULABLE"
    COSCHED_FAILED = "COSCHED_FAILED"
    # Reconcile-protocol sentinel only: the worker has no record of the attempt. Never stored.
    MISSING = "MISSING"


class JobState(StrEnum):
    PENDING = "PENDING"
    RUNNING = "RUNNING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    KILLED = "KILLED"
    WORKER_FAILED = "WORKER_FAILED"
    UNSCHEDULABLE = "UNSCHEDULABLE"


TERMINAL_TASK_STATES = frozenset(
    {
        TaskState.SUCCEEDED,
        TaskState.FAILED,
        TaskState.KILLED,
        TaskState.WORKER_FAILED,
        TaskState.PREEMPTED,
        TaskState.UNSCHEDULABLE,
        TaskState.COSCHED_FAILED,
    }
)
ACTIVE_TASK_STATES = frozenset({TaskState.ASSIGNED, TaskState.BUILDING, TaskState.RUNNING})
EXECUTING_TASK_STATES = frozenset({TaskState.BUILDING, TaskState.RUNNING})
TERMINAL_JOB_STATES = frozenset(
    {JobState.SUCCEEDED, JobState.FAILED, JobState.KILLED, JobState.WORKER_FAILED, JobState.UNSCHEDULABLE}
)


class PriorityBand(StrEnum):
    """Higher bands go first and may preempt strictly lower ones."""

    PRODUCTION = "PRODUCTION"
    INTERACTIVE = "INTERACTIVE"
    BATCH = "BATCH"

    @property
    def rank(self) -> int:
        """0 is the most important band."""
        return _BAND_RANK[self]


_BAND_RANK = {PriorityBand.PRODUCTION: 0, PriorityBand.INTERACTIVE: 1, PriorityBand.BATCH: 2}


class ConstraintOp(StrEnum):
    EQ = "EQ"
    NE = "NE"
    IN = "IN"
    EXISTS = "EXISTS"
    NOT_EXISTS = "NOT_EXISTS"
    GT = "GT"
    GE = "GE"
    LT = "LT"
    LE = "LE"


class StopReason(StrEnum):
    CANCELLED = "CANCELLED"
    PREEMPTED = "PREEMPTED"
    SUPERSEDED = "SUPERSEDED"
    JOB_TERMINATED = "JOB_TERMINATED"
    TASK_TIMEOUT = "TASK_TIMEOUT"
    WORKER_DRAIN = "WORKER_DRAIN"


class WorkerStatus(StrEnum):
    HEALTHY = "HEALTHY"
    DEGRADED = "DEGRADED"
    DEAD = "DEAD"
