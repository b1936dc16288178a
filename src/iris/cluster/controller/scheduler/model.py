"""Plain data the scheduling kernel reads and returns: a snapshot in, decisions out."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import final

from iris.rpc.enums import PriorityBand
from iris.rpc.models import Constraint, ResourceSpec

from .formatting import format_bytes, format_cpu, format_devices


@dataclass(frozen=True, slots=True)
class Resources:
    """A request (what a task needs) or an amount (capacity, usage, free) of one worker.

    Device type and variant are lowercase; a worker offers at most one kind of device.
    """

    cpu_millicores: int = 0
    memory_bytes: int = 0
    disk_bytes: int = 0
    device_type: str = ""
    device_variant: str = ""
    device_count: int = 0

    @classmethod
    def from_spec(cls, spec: ResourceSpec) -> Resources:
        """Convert a wire ``ResourceSpec``; a ``cpu`` device means "no accelerator"."""
        device = spec.device
        device_type = device.type.lower() if device is not None else ""
        if device is None or device_type == "cpu":
            return cls(spec.cpu_millicores, spec.memory_bytes, spec.disk_bytes)
        return cls(
            spec.cpu_millicores,
            spec.memory_bytes,
            spec.disk_bytes,
            device_type,
            device.variant.lower(),
            device.count,
        )

    def __add__(self, other: Resources) -> Resources:
        return Resources(
            self.cpu_millicores + other.cpu_millicores,
            self.memory_bytes + other.memory_bytes,
            self.disk_bytes + other.disk_bytes,
            self.device_type or other.device_type,
            self.device_variant or other.device_variant,
            self.device_count + other.device_count,
        )

    def __sub__(self, other: Resources) -> Resources:
        return Resources(
            self.cpu_millicores - other.cpu_millicores,
            self.memory_bytes - other.memory_bytes,
            self.disk_bytes - other.disk_bytes,
            self.device_type or other.device_type,
            self.device_variant or other.device_variant,
            self.device_count - other.device_count,
        )

    def device_matches(self, offer: Resources) -> bool:
        """Whether a worker offering ``offer``'s device kind can serve this request's device."""
        if not self.device_type and not self.device_count:
            return True
        if self.device_type and self.device_type != offer.device_type:
            return False
        return not self.device_variant or self.device_variant == offer.device_variant

    def fits(self, free: Resources) -> bool:
        """Whether this request fits into ``free`` (cpu, memory, disk and device)."""
        return (
            self.cpu_millicores <= free.cpu_millicores
            and self.memory_bytes <= free.memory_bytes
            and self.disk_bytes <= free.disk_bytes
            and self.device_count <= free.device_count
            and self.device_matches(free)
        )

    def describe(self) -> str:
        """Human form, e.g. ``2 cpu, 4GB memory, 1 gpu (h100)``; zero amounts are left out."""
        parts: list[str] = []
        if self.cpu_millicores:
            parts.append(format_cpu(self.cpu_millicores))
        if self.memory_bytes:
            parts.append(f"{format_bytes(self.memory_bytes)} memory")
        if self.disk_bytes:
            parts.append(f"{format_bytes(self.disk_bytes)} disk")
        if self.device_count or self.device_type:
            parts.append(format_devices(self.device_count, self.device_type, self.device_variant))
        return ", ".join(parts) or "nothing"


@dataclass(frozen=True, slots=True)
class WorkerView:
    """One worker as the scheduler sees it in this pass."""

    worker_id: str
    capacity: Resources
    used: Resources = field(default_factory=Resources)  # held by attempts not yet released here
    attributes: Mapping[str, str] = field(default_factory=dict[str, str])
    schedulable: bool = True  # False: degraded, unhealthy or draining -> no new placements


@final
@dataclass(frozen=True, slots=True)
class TaskRequest:
    """A pending task asking for a place to run."""

    task_id: str
    job_id: str
    user: str
    resources: Resources
    constraints: tuple[Constraint, ...] = ()
    band: PriorityBand = PriorityBand.INTERACTIVE
    depth: int = 1  # job tree depth (1 = root job)
    root_submitted_at: float = 0.0  # submission time of the root job of the tree
    submitted_at: float = 0.0
    group_by: str | None = None  # coscheduling attribute; all pending tasks of the job form a gang
    gang_size: int = 1
    # Soft constraints: feasible workers satisfying more of them are tried first; never blocking.
    preferences: tuple[Constraint, ...] = ()


@dataclass(frozen=True, slots=True)
class RunningTask:
    """A task holding resources on a worker (its ``used`` already includes them).

    ``stopping`` marks a task the controller is already stopping (preempted or killed): its
    resources are still held, but it is never chosen as a victim again, and a pending task
    that fits once it exits waits for it instead of preempting someone else.
    """

    task_id: str
    job_id: str
    worker_id: str
    resources: Resources
    band: PriorityBand
    started_at: float = 0.0
    group_by: str | None = None
    stopping: bool = False
    user: str = ""  # the job's user ("" : taken from ``job_id``); budgets charge it


class ReasonCode(StrEnum):
    """Why a task is still pending. A ``str``, so ``reason.code == "gang"`` works."""

    NO_WORKERS = "no_workers"  # none registered, or none schedulable
    CONSTRAINTS = "constraints"  # no schedulable worker satisfies constraints, taints or device kind
    EXCEEDS_CAPACITY = "exceeds_capacity"  # larger than any matching worker even when empty
    RESOURCES = "resources"  # would fit a matching worker, but none has enough free now
    GANG = "gang"  # no group of workers can take the whole gang at once
    PREEMPTING = "preempting"  # capacity is being freed for it; it places once victims exit
    QUEUED = "queued"  # this pass reached ``max_assignments``
    BUDGET = "budget"  # its user's running work is at the user's budget (gates.py)


@dataclass(frozen=True, slots=True)
class PendingReason:
    code: str
    message: str  # one sentence a person can act on
    position: int | None = None  # queue position within its band (1 = next)


@dataclass(frozen=True, slots=True)
class Preemption:
    victim_task_id: str
    worker_id: str
    preemptor_task_id: str


@dataclass(frozen=True)
class SchedulingResult:
    assignments: list[tuple[str, str]]  # (task_id, worker_id)
    preemptions: list[Preemption]
    pending: dict[str, PendingReason]  # every task not assigned gets one
    # time in each stage (kernel.STAGES): observed, not decided, so never part of equality
    stage_seconds: dict[str, float] = field(default_factory=dict[str, float], compare=False)
