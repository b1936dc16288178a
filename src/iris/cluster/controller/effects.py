"""What a decision kernel asks the store to write: typed effects, applied by ``store.commit``.

The shape every state change in the controller takes::

    snapshot = store.<something>_snapshot(cur, ...)   # a frozen read (typed rows, versions)
    effects  = round_kernel.<kernel>(snapshot, now)   # pure: no I/O, no clock, no randomness
    applied  = store.commit(cur, effects)             # one transaction, every write guarded

An ``Effects`` is a list of ``Change``s. A change is one decision (one task moving, one gang
placed together, one job finishing) and applies whole or not at all: each of its writes names the
version (tasks, attempts) or state (jobs) it was decided from, and if any of them moved on since
the snapshot, the commit drops the change. A dropped change is not retried: the next round reads
the newer state and decides again. Task writes must follow ``transitions.TASK_TRANSITIONS``.

``Effects.notes`` are advisory texts (pending reasons) guarded only by the task's state.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum, StrEnum

from iris.cluster.controller.task_state import AttemptSnapshot, TaskSnapshot
from iris.rpc.enums import JobState
from iris.rpc.models import JobSpec, RegisterRequest


class EventKind(StrEnum):
    JOB_SUBMITTED = "job_submitted"
    JOB_RUNNING = "job_running"
    JOB_SUCCEEDED = "job_succeeded"
    JOB_FAILED = "job_failed"
    JOB_KILLED = "job_killed"
    JOB_WORKER_FAILED = "job_worker_failed"
    JOB_UNSCHEDULABLE = "job_unschedulable"
    TASK_ASSIGNED = "task_assigned"
    TASK_PENDING = "task_pending"
    TASK_BUILDING = "task_building"
    TASK_RUNNING = "task_running"
    TASK_SUCCEEDED = "task_succeeded"
    TASK_FAILED = "task_failed"
    TASK_KILLED = "task_killed"
    TASK_WORKER_FAILED = "task_worker_failed"
    TASK_PREEMPTED = "task_preempted"
    TASK_UNSCHEDULABLE = "task_unschedulable"
    TASK_COSCHED_FAILED = "task_cosched_failed"
    WORKER_REGISTERED = "worker_registered"
    WORKER_REAPED = "worker_reaped"

    @classmethod
    def of_job(cls, state: JobState) -> EventKind:
        return cls(f"job_{state.value.lower()}")

    @classmethod
    def of_task(cls, state: object) -> EventKind:
        return cls(f"task_{str(state).lower()}")


@dataclass(frozen=True, slots=True)
class Event:
    """One line of a job's (or worker's) history."""

    kind: EventKind
    message: str
    job_id: str | None = None
    task_id: str | None = None
    attempt_uid: str | None = None
    worker_id: str | None = None


@dataclass(frozen=True, slots=True)
class MoveTask:
    """Write ``after`` over the task row, if it is still at ``before.version``."""

    before: TaskSnapshot
    after: TaskSnapshot
    pending_reason: str | None = None


@dataclass(frozen=True, slots=True)
class MoveAttempt:
    """Write ``after`` over the attempt row, if it is still at ``before.version``."""

    before: AttemptSnapshot
    after: AttemptSnapshot
    message: str | None = None


@dataclass(frozen=True, slots=True)
class Assign:
    """A PENDING task (still at ``task_version``) gets a new ASSIGNED attempt.

    ``worker_id`` is None on Kubernetes; otherwise the worker must still be registered. The store
    numbers the attempt and names it; ``gang`` members assigned in one change share a generation.
    """

    task_id: str
    job_id: str
    task_version: int
    worker_id: str | None
    gang: bool = False


@dataclass(frozen=True, slots=True)
class SetJob:
    """Move a job from ``before`` (still its state) to ``state``; a terminal state drops its endpoints."""

    job_id: str
    before: JobState
    state: JobState
    started_at: float | None = None
    finished_at: float | None = None
    error: str | None = None
    exit_code: int | None = None


@dataclass(frozen=True, slots=True)
class InsertJob:
    """A new job with its tasks; ``replaces`` names a finished job of the same id to remove first."""

    job_id: str
    spec: JobSpec
    user: str
    parent_job_id: str | None
    root_job_id: str
    depth: int
    root_submitted_at: float
    replaces: str | None = None
    run_uid: str = ""  # empty: the store draws a fresh one


@dataclass(frozen=True, slots=True)
class UpsertWorker:
    worker_id: str
    request: RegisterRequest


@dataclass(frozen=True, slots=True)
class DeleteWorker:
    worker_id: str


Write = MoveTask | MoveAttempt | Assign | SetJob | InsertJob | UpsertWorker | DeleteWorker


@dataclass(frozen=True, slots=True)
class Change:
    """One decision: its writes and events apply together, or (a guard failed) not at all."""

    writes: tuple[Write, ...]
    events: tuple[Event, ...] = ()


@dataclass(frozen=True, slots=True)
class Note:
    """An advisory pending reason, written only while the task is still in ``state``."""

    task_id: str
    state: str
    reason: str | None


@dataclass(frozen=True)
class Effects:
    changes: tuple[Change, ...] = ()
    notes: tuple[Note, ...] = ()
    # Another round is worth running at once (something finished, or capacity was freed).
    urgent: bool = False

    def __add__(self, other: Effects) -> Effects:
        return Effects(
            changes=self.changes + other.changes,
            notes=self.notes + other.notes,
            urgent=self.urgent or other.urgent,
        )

    def __bool__(self) -> bool:
        return bool(self.changes or self.notes)


class Verdict(Enum):
    """What the commit's guards say of one change."""

    APPLIED = "applied"  # every guard holds: the change is written
    STALE = "stale"  # a row it was decided from moved on: dropped, re-decided next round
    REFUSED = "refused"  # names a task edge not in transitions.TASK_TRANSITIONS: a kernel bug


@dataclass
class Applied:
    """What ``store.commit`` actually wrote."""

    changes: list[Change] = field(default_factory=list[Change])
    # Decided from a state that has since moved on (re-decided next round).
    dropped: list[Change] = field(default_factory=list[Change])
    # A task edge not in transitions.TASK_TRANSITIONS: a kernel bug, logged and never written.
    refused: list[Change] = field(default_factory=list[Change])
    # Jobs whose tasks moved (to roll up), workers whose desired set changed (to reconcile).
    jobs: set[str] = field(default_factory=set[str])
    workers: set[str] = field(default_factory=set[str])
    # task id -> (attempt uid, attempt number) of every attempt created.
    attempts: dict[str, tuple[str, int]] = field(default_factory=dict[str, tuple[str, int]])
    finished_jobs: list[str] = field(default_factory=list[str])
    # A worker registered (or re-registered) or was deleted.
    fleet_changed: bool = False

    def merge(self, other: Applied) -> None:
        self.changes += other.changes
        self.dropped += other.dropped
        self.refused += other.refused
        self.jobs |= other.jobs
        self.workers |= other.workers
        self.attempts.update(other.attempts)
        self.finished_jobs += other.finished_jobs
        self.fleet_changed |= other.fleet_changed
