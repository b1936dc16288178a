"""The row and snapshot types the store reads and the pure kernels decide from (no SQL here).

``round_kernel.py`` and the other kernels import these types from this module, never from the ``store`` package
(the only module that runs SQL; import-linter keeps kernels away from it and from ``db``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from iris.cluster.controller.scheduler.model import Resources
from iris.cluster.controller.task_state import AttemptSnapshot, TaskSnapshot
from iris.rpc.enums import JobState, PriorityBand, StopReason, TaskState
from iris.rpc.models import JobSpec, ResourceSpec, WorkerHealth


@dataclass(frozen=True, slots=True)
class JobRow:
    job_id: str
    name: str
    user: str
    parent_job_id: str | None
    root_job_id: str
    depth: int
    state: JobState
    priority: PriorityBand
    replicas: int
    spec_json: str
    submitted_at: float
    root_submitted_at: float
    started_at: float | None
    finished_at: float | None
    scheduling_deadline: float | None
    error: str | None
    exit_code: int | None
    pending_reason: str | None
    run_uid: str = ""  # this run of the job id (a --replace starts a new one)

    @property
    def spec(self) -> JobSpec:
        return JobSpec.model_validate_json(self.spec_json)


@dataclass(frozen=True, slots=True)
class WorkerRow:
    worker_id: str
    address: str
    capacity: ResourceSpec
    attributes: dict[str, str]
    slice_id: str | None
    scale_group: str | None
    registered_at: float
    last_contact_at: float | None
    health: WorkerHealth | None


@dataclass(frozen=True, slots=True)
class LiveAttempt:
    """An attempt whose runtime is not yet confirmed gone, with what a reconcile plan needs."""

    attempt_uid: str
    task_id: str
    job_id: str
    task_index: int
    attempt_number: int
    worker_id: str | None
    state: TaskState
    stop_reason: StopReason | None
    task_state: TaskState
    current_attempt_uid: str | None


@dataclass(frozen=True, slots=True)
class PendingTask:
    task_id: str
    job_id: str
    version: int
    pending_reason: str | None
    user: str
    priority: PriorityBand
    depth: int
    root_submitted_at: float
    submitted_at: float
    group_by: str | None
    resources: Resources
    spec_json: str


@dataclass(frozen=True, slots=True)
class AttemptUsage:
    """One unreleased attempt on a worker: what it holds there and whether it still runs."""

    worker_id: str
    task_id: str
    job_id: str
    state: TaskState
    stop_reason: StopReason | None
    started_at: float | None
    priority: PriorityBand
    group_by: str | None
    resources: Resources
    user: str = ""


@dataclass(frozen=True)
class RoundSnapshot:
    pending: list[PendingTask] = field(default_factory=list[PendingTask])
    workers: list[WorkerRow] = field(default_factory=list[WorkerRow])
    usage: list[AttemptUsage] = field(default_factory=list[AttemptUsage])
    # Gang jobs with pending members whose earlier members are still stopping.
    stopping_gangs: frozenset[str] = frozenset()
    # RUNNING tasks past their job's execution timeout, with their current attempt.
    timed_out: list[tuple[TaskSnapshot, AttemptSnapshot | None]] = field(
        default_factory=list[tuple[TaskSnapshot, AttemptSnapshot | None]]
    )
    # Waiting tasks past their job's scheduling deadline, with their attempt and pending reason.
    expired: list[tuple[TaskSnapshot, AttemptSnapshot | None, str | None]] = field(
        default_factory=list[tuple[TaskSnapshot, AttemptSnapshot | None, str | None]]
    )


@dataclass(frozen=True)
class ObservationSnapshot:
    """The attempts observed (with their workers) and their tasks, as the kernel folds them."""

    attempts: Mapping[str, AttemptSnapshot]
    tasks: Mapping[str, TaskSnapshot]


@dataclass(frozen=True)
class JobSnapshot:
    """A job with all its tasks and their current attempts: what a roll-up or a kill decides from."""

    job: JobRow
    tasks: tuple[TaskSnapshot, ...]
    attempts: Mapping[str, AttemptSnapshot]
    max_task_failures: int
    coscheduled: bool


@dataclass(frozen=True, slots=True)
class Fleet:
    """The workers and what their unreleased attempts hold: what a pass places against."""

    workers: list[WorkerRow]
    usage: list[AttemptUsage]


@dataclass(frozen=True)
class JobRollup:
    """A live job and the histogram of its tasks' states: enough to roll most jobs up."""

    job: JobRow
    counts: Mapping[TaskState, int]
    max_task_failures: int
    coscheduled: bool
    # The earliest start of its tasks, read only for a job never seen running whose tasks all
    # succeeded (quick tasks may never be seen RUNNING): the roll-up ends it with that start.
    first_task_start: float | None = None
