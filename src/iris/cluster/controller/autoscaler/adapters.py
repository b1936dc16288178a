"""Turn what the controller has (unplaced scheduler requests, workers) into autoscaler input."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from typing import Protocol

from iris.cluster.controller.autoscaler.model import DemandEntry
from iris.cluster.controller.scheduler.model import PendingReason, ReasonCode, Resources, TaskRequest
from iris.rpc.models import DeviceSpec, ResourceSpec


class _WorkerWithSlice(Protocol):
    @property
    def worker_id(self) -> str: ...

    @property
    def slice_id(self) -> str | None: ...


# Pending for reasons more machines would not fix: the pass hit its cap, or victims are exiting.
_NOT_CAPACITY = frozenset({ReasonCode.QUEUED, ReasonCode.PREEMPTING})


def demand_from_requests(
    requests: Iterable[TaskRequest], pending: Mapping[str, PendingReason] | None = None
) -> list[DemandEntry]:
    """One entry per job, in the order the jobs first appear (keep the scheduler's priority order).

    Tasks of a coscheduled job (``group_by`` set) form one gang entry of ``gang_size`` tasks.
    With the scheduler's ``pending`` reasons, tasks that only wait for the next pass or for a
    preemption to finish are left out: new slices would not help them.
    """
    by_job: dict[str, list[TaskRequest]] = {}
    for request in requests:
        reason = pending.get(request.task_id) if pending is not None else None
        if reason is not None and reason.code in _NOT_CAPACITY:
            continue
        by_job.setdefault(request.job_id, []).append(request)
    entries: list[DemandEntry] = []
    for job_id, tasks in by_job.items():
        first = tasks[0]
        entries.append(
            DemandEntry(
                job_id=job_id,
                task_ids=tuple(t.task_id for t in tasks),
                resources=resource_spec(first.resources),
                constraints=first.constraints,
                gang_size=max(first.gang_size, len(tasks)) if first.group_by is not None else 1,
                group_by=first.group_by,
            )
        )
    return entries


def resource_spec(resources: Resources) -> ResourceSpec:
    device = None
    if resources.device_type or resources.device_count:
        device = DeviceSpec(
            type=resources.device_type or "gpu",
            variant=resources.device_variant,
            count=resources.device_count,
        )
    return ResourceSpec(
        cpu_millicores=resources.cpu_millicores,
        memory_bytes=resources.memory_bytes,
        disk_bytes=resources.disk_bytes,
        device=device,
    )


def slice_usage_from_workers(
    workers: Iterable[_WorkerWithSlice], busy_worker_ids: Collection[str]
) -> dict[str, int]:
    """Per slice id, how many of its workers hold active attempts (workers without a slice are skipped)."""
    usage: dict[str, int] = {}
    for worker in workers:
        if worker.slice_id:
            usage.setdefault(worker.slice_id, 0)
            if worker.worker_id in busy_worker_ids:
                usage[worker.slice_id] += 1
    return usage
