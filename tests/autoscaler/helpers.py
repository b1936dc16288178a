"""Builders for planner inputs, so each table row reads as a sentence."""

from __future__ import annotations

from typing import Any

from iris.cluster.config import AutoscalerDefaults, BackoffConfig, ScaleGroupConfig
from iris.cluster.controller.autoscaler import BackoffState, DemandEntry, GroupSnapshot, SliceView
from iris.cluster.platforms import SliceState
from iris.rpc.models import Constraint, DeviceSpec, ResourceSpec

TIMINGS = AutoscalerDefaults(
    evaluation_interval_s=10,
    scale_down_delay_s=60,
    boot_timeout_s=300,
    max_creates_per_evaluation=10,
    max_creates_per_minute=100,
    backoff=BackoffConfig(failure_threshold=3, window_s=600, initial_s=60, multiplier=2, max_s=600),
)


def group(
    name: str = "cpu",
    *,
    cpu: float = 1,
    memory: str = "1GB",
    device: tuple[str, str, int] | None = None,
    attrs: dict[str, str] | None = None,
    **fields: Any,
) -> ScaleGroupConfig:
    fields.setdefault("max_slices", 4)
    resources: dict[str, Any] = {"cpu": cpu, "memory": memory}
    if device is not None:
        resources["device"] = DeviceSpec(type=device[0], variant=device[1], count=device[2])
    return ScaleGroupConfig(name=name, resources=ResourceSpec(**resources), attributes=attrs or {}, **fields)


def snap(
    config: ScaleGroupConfig,
    *slices: SliceView,
    backoff: BackoffState | None = None,
    next_seq: int = 1,
    recent: tuple[float, ...] = (),
) -> GroupSnapshot:
    return GroupSnapshot(config, tuple(slices), backoff or BackoffState(), next_seq, recent)


def ready(slice_id: str, idle_since: float | None = None, created: float = 0.0) -> SliceView:
    """A READY slice: busy unless ``idle_since`` is given."""
    return SliceView(slice_id, SliceState.READY, created, ready_at=created + 1, idle_since=idle_since)


def booting(slice_id: str, created: float = 0.0) -> SliceView:
    return SliceView(slice_id, SliceState.BOOTING, created)


def failed(slice_id: str, *, was_ready: bool = False, created: float = 0.0) -> SliceView:
    return SliceView(
        slice_id,
        SliceState.FAILED,
        created,
        ready_at=created + 1 if was_ready else None,
        error="worker exited",
    )


def demand(
    job: str = "/u/job",
    tasks: int = 1,
    *,
    cpu: float = 1,
    memory: str = "512MB",
    device: tuple[str, str, int] | None = None,
    constraints: tuple[Constraint, ...] = (),
    group_by: str | None = None,
) -> DemandEntry:
    resources: dict[str, Any] = {"cpu": cpu, "memory": memory}
    if device is not None:
        resources["device"] = DeviceSpec(type=device[0], variant=device[1], count=device[2])
    return DemandEntry(
        job_id=job,
        task_ids=tuple(f"{job}/{i}" for i in range(tasks)),
        resources=ResourceSpec(**resources),
        constraints=constraints,
        gang_size=tasks if group_by else 1,
        group_by=group_by,
    )
