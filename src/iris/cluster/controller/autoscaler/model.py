"""Plain data in and out of the autoscaler planner: snapshots, demand, plans and actions."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum

from iris.cluster.config import AutoscalerDefaults, ScaleGroupConfig
from iris.cluster.platforms.base import SliceState
from iris.rpc.models import Constraint, ResourceSpec

# ---------------------------------------------------------------- input


@dataclass(frozen=True)
class SliceView:
    """One slice as the planner sees it."""

    slice_id: str
    state: SliceState
    created_at: float
    ready_at: float | None = None
    """When the autoscaler first saw it READY (None until then)."""
    idle_since: float | None = None
    """Since when no task runs on any of its workers; None while one does (or before READY)."""
    worker_ids: tuple[str, ...] = ()
    error: str | None = None

    @property
    def busy(self) -> bool:
        return self.state is SliceState.READY and self.idle_since is None


@dataclass(frozen=True)
class BackoffState:
    """Boot-failure bookkeeping of one group."""

    failure_times: tuple[float, ...] = ()
    """Boot failures not yet consumed by a backoff (older than the window are dropped)."""
    level: int = 0
    """Backoffs since a slice of the group last became ready (makes the next one longer)."""
    until: float = 0.0
    """No slice is created before this time."""
    reason: str = ""
    last_success: float = 0.0
    """``ready_at`` of the newest slice that became ready (resets ``level``)."""

    def active(self, now: float) -> bool:
        return now < self.until


@dataclass(frozen=True)
class GroupSnapshot:
    config: ScaleGroupConfig
    slices: tuple[SliceView, ...] = ()
    backoff: BackoffState = BackoffState()
    next_seq: int = 1
    """Sequence number of the next slice id (``<group>-<seq>``)."""
    recent_creates: tuple[float, ...] = ()
    """Creation times within the last minute (for the per-minute rate limit)."""


@dataclass(frozen=True)
class DemandEntry:
    """Tasks the scheduler could not place. A gang (``group_by`` set) is one entry needing one slice."""

    job_id: str
    task_ids: tuple[str, ...]
    resources: ResourceSpec
    constraints: tuple[Constraint, ...] = ()
    gang_size: int = 1
    group_by: str | None = None

    @property
    def is_gang(self) -> bool:
        return self.group_by is not None

    @property
    def task_count(self) -> int:
        return max(len(self.task_ids), 1)


@dataclass(frozen=True)
class AutoscalerSnapshot:
    groups: tuple[GroupSnapshot, ...]
    demand: tuple[DemandEntry, ...] = ()
    """In the order capacity should go to (most important first)."""
    timings: AutoscalerDefaults = field(default_factory=AutoscalerDefaults)


# ---------------------------------------------------------------- output


class ActionKind(StrEnum):
    SCALE_UP = "scale_up"
    SCALE_DOWN = "scale_down"
    SLICE_READY = "slice_ready"
    BOOT_FAILED = "boot_failed"
    BOOT_TIMEOUT = "boot_timeout"
    SLICE_FAILED = "slice_failed"
    BACKOFF = "backoff"
    CREATE_FAILED = "create_failed"
    TERMINATE_FAILED = "terminate_failed"
    REAPED = "reaped"
    ADOPTED = "adopted"
    SLICE_LOST = "slice_lost"
    UNKNOWN_GROUP = "unknown_group"


@dataclass(frozen=True)
class ScaleAction:
    """One entry of the action log."""

    ts: float
    group: str
    action: ActionKind
    slice_id: str | None
    reason: str


@dataclass(frozen=True)
class CreateSlice:
    group: str
    slice_id: str
    reason: str


@dataclass(frozen=True)
class TerminateSlice:
    group: str
    slice_id: str
    reason: str
    boot_failure: bool = False
    worker_ids: tuple[str, ...] = ()
    """Workers that go away with the slice (the controller can drop them at once)."""


@dataclass(frozen=True)
class UnmetDemand:
    """Demand no group takes now; ``reason`` says why (backoff, max_slices, nothing fits)."""

    job_id: str
    task_ids: tuple[str, ...]
    reason: str


@dataclass(frozen=True)
class GroupDecision:
    """What the planner concluded for one group, and the group state to persist."""

    group: str
    target: int
    demand_tasks: int
    demand_slices: int
    busy: int
    idle: int
    booting: int
    creates: tuple[str, ...]
    terminates: tuple[str, ...]
    backoff: BackoffState
    next_seq: int
    recent_creates: tuple[float, ...]
    status: str
    # Pending tasks this group is the first choice for: those it takes (demand_tasks) and those
    # that wait because it is at max_slices or in backoff.
    waiting_tasks: int = 0


@dataclass(frozen=True)
class AutoscalerPlan:
    creates: tuple[CreateSlice, ...]
    terminates: tuple[TerminateSlice, ...]
    groups: tuple[GroupDecision, ...]
    actions: tuple[ScaleAction, ...]
    unmet: tuple[UnmetDemand, ...]
    hints: Mapping[str, str]
    """Per job id: one line on what the autoscaler does for its pending tasks (for pending reasons)."""

    def group(self, name: str) -> GroupDecision:
        return next(g for g in self.groups if g.group == name)
