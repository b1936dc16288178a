"""Cluster vocabulary: job names, resources, entrypoints, constraints, states and bands."""

from __future__ import annotations

import re
from dataclasses import dataclass

from iris.rpc.enums import (
    ACTIVE_TASK_STATES,
    EXECUTING_TASK_STATES,
    TERMINAL_JOB_STATES,
    TERMINAL_TASK_STATES,
    ConstraintOp,
    JobState,
    PriorityBand,
    StopReason,
    TaskState,
)
from iris.rpc.models import (
    AttemptObservation,
    Constraint,
    CoschedulingConfig,
    DesiredAttempt,
    DeviceSpec,
    Entrypoint,
    EnvironmentSpec,
    JobSpec,
    ResourceSpec,
    WorkerHealth,
)

__all__ = [
    "ACTIVE_TASK_STATES",
    "AttemptRef",
    "DesiredGroup",
    "GroupReport",
    "EXECUTING_TASK_STATES",
    "TERMINAL_JOB_STATES",
    "TERMINAL_TASK_STATES",
    "Constraint",
    "ConstraintOp",
    "CoschedulingConfig",
    "DeviceSpec",
    "Entrypoint",
    "EnvironmentSpec",
    "JobName",
    "JobSpec",
    "JobState",
    "PriorityBand",
    "ResourceSpec",
    "StopReason",
    "TaskState",
    "TaskTarget",
]

_COMPONENT = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


@dataclass(frozen=True, slots=True)
class JobName:
    """A job or task name as a path: ``/user/job``, ``/user/job/child``, task ``/user/job/0``.

    The first component is the user. A job component is never all digits (that would
    read as a task index).
    """

    parts: tuple[str, ...]
    task_index: int | None = None

    @classmethod
    def parse(cls, text: str) -> JobName:
        if not text.startswith("/"):
            raise ValueError(f"job names start with '/': {text!r}")
        raw = text.strip("/").split("/")
        if len(raw) < 2 or any(not p for p in raw):
            raise ValueError(f"a job name is /user/job[/child...]: {text!r}")
        task_index: int | None = None
        if raw[-1].isdigit():
            task_index = int(raw[-1])
            raw = raw[:-1]
            if len(raw) < 2:
                raise ValueError(f"a task name is /user/job/N: {text!r}")
        for part in raw:
            cls.check_component(part)
        return cls(tuple(raw), task_index)

    @staticmethod
    def check_component(part: str) -> None:
        if not _COMPONENT.match(part):
            raise ValueError(
                f"bad name component {part!r}: use letters, digits, '.', '_' or '-', starting with a letter or digit"
            )
        if part.isdigit():
            raise ValueError(f"a job name component cannot be all digits: {part!r}")

    @classmethod
    def root(cls, user: str, name: str) -> JobName:
        cls.check_component(user)
        cls.check_component(name)
        return cls((user, name))

    def child(self, name: str) -> JobName:
        self.check_component(name)
        return JobName((*self.parts, name))

    def task(self, index: int) -> JobName:
        return JobName(self.parts, index)

    @property
    def job(self) -> JobName:
        return JobName(self.parts)

    @property
    def user(self) -> str:
        return self.parts[0]

    @property
    def parent(self) -> JobName | None:
        """The parent job of a job (None for a root job); the job of a task."""
        if self.task_index is not None:
            return self.job
        if len(self.parts) <= 2:
            return None
        return JobName(self.parts[:-1])

    @property
    def depth(self) -> int:
        """1 for a root job, 2 for its children, ... (the user segment does not count)."""
        return len(self.parts) - 1

    @property
    def namespace(self) -> str:
        """The root job's path without the leading slash: endpoints are isolated per namespace."""
        return "/".join(self.parts[:2])

    def __str__(self) -> str:
        base = "/" + "/".join(self.parts)
        return base if self.task_index is None else f"{base}/{self.task_index}"


@dataclass(frozen=True)
class TaskTarget:
    """Where task RPCs (logs, exec, process status) go.

    WORKER: ``address`` of the worker daemon running the attempt. KUBERNETES: ``attempt_uid``,
    from which the pod name is rebuilt, so no pod name is ever stored.
    """

    address: str | None = None
    attempt_uid: str | None = None

    def __post_init__(self) -> None:
        if (self.address is None) == (self.attempt_uid is None):
            raise ValueError("a TaskTarget names exactly one of address or attempt_uid")


@dataclass(frozen=True, slots=True)
class AttemptRef:
    """One attempt of a task, and where its RPCs (logs, exec, status) go."""

    target: TaskTarget
    attempt_uid: str
    task_id: str


@dataclass(frozen=True, slots=True)
class DesiredGroup:
    """The complete desired set of attempts of one worker daemon (WORKER), or of the whole
    cluster (KUBERNETES: no ``worker_id`` and no ``address``)."""

    attempts: tuple[DesiredAttempt, ...]
    worker_id: str | None = None
    address: str | None = None
    # Whether this reconcile renews the worker's fencing lease (see worker_health).
    renew_lease: bool = True


@dataclass(frozen=True, slots=True)
class GroupReport:
    """What reconciling one desired group found: one observation per attempt it was asked about
    (and nothing else), or ``observations`` None when the worker or API server did not answer."""

    worker_id: str | None
    observations: tuple[AttemptObservation, ...] | None
    health: WorkerHealth | None = None
    error: str | None = None
    # Without an answer: whether the request may still have reached the worker (and renewed its
    # fencing lease), as when the answer was lost; False when the connection itself failed.
    may_have_arrived: bool = False
