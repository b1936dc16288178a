"""Short constructors for scheduler tests: cpu in cores, memory and disk in GB."""

from __future__ import annotations

from iris.cluster.controller.scheduler import Resources, RunningTask, TaskRequest, WorkerView
from iris.rpc.enums import ConstraintOp, PriorityBand
from iris.rpc.models import Constraint

GB = 1000**3

PROD = PriorityBand.PRODUCTION
INTER = PriorityBand.INTERACTIVE
BATCH = PriorityBand.BATCH


def res(
    cpu: float = 1, mem: float = 1, disk: float = 0, device: tuple[str, str, int] | None = None
) -> Resources:
    device_type, variant, count = device or ("", "", 0)
    return Resources(round(cpu * 1000), round(mem * GB), round(disk * GB), device_type, variant, count)


def worker(
    worker_id: str,
    cpu: float = 4,
    mem: float = 16,
    disk: float = 100,
    *,
    device: tuple[str, str, int] | None = None,
    used: Resources | None = None,
    attrs: dict[str, str] | None = None,
    schedulable: bool = True,
) -> WorkerView:
    return WorkerView(worker_id, res(cpu, mem, disk, device), used or Resources(), attrs or {}, schedulable)


def task(
    task_id: str,
    cpu: float = 1,
    mem: float = 1,
    disk: float = 0,
    *,
    device: tuple[str, str, int] | None = None,
    job: str | None = None,
    user: str = "alice",
    band: PriorityBand = INTER,
    constraints: tuple[Constraint, ...] = (),
    depth: int = 1,
    root_submitted_at: float = 0.0,
    submitted_at: float = 0.0,
    group_by: str | None = None,
    gang_size: int = 1,
    preferences: tuple[Constraint, ...] = (),
) -> TaskRequest:
    return TaskRequest(
        task_id=task_id,
        job_id=job or task_id.rsplit("/", 1)[0],
        user=user,
        resources=res(cpu, mem, disk, device),
        constraints=constraints,
        band=band,
        depth=depth,
        root_submitted_at=root_submitted_at,
        submitted_at=submitted_at,
        group_by=group_by,
        gang_size=gang_size,
        preferences=preferences,
    )


def gang(job: str, size: int, group_by: str = "tpu-name", **kwargs) -> list[TaskRequest]:
    return [task(f"{job}/{i}", job=job, group_by=group_by, gang_size=size, **kwargs) for i in range(size)]


def running(
    task_id: str,
    worker_id: str,
    cpu: float = 1,
    mem: float = 1,
    *,
    band: PriorityBand = BATCH,
    started_at: float = 0.0,
    group_by: str | None = None,
    stopping: bool = False,
    device: tuple[str, str, int] | None = None,
) -> RunningTask:
    return RunningTask(
        task_id=task_id,
        job_id=task_id.rsplit("/", 1)[0],
        worker_id=worker_id,
        resources=res(cpu, mem, 0, device),
        band=band,
        started_at=started_at,
        group_by=group_by,
        stopping=stopping,
    )


def con(key: str, op: str = "EQ", value: str | None = None, values: list[str] | None = None) -> Constraint:
    return Constraint(key=key, op=ConstraintOp(op), value=value, values=values or [])


def placed(result) -> dict[str, str]:
    return dict(result.assignments)


def occupied(workers: list[WorkerView], tasks: list[RunningTask]) -> list[WorkerView]:
    """The workers with ``used`` set to what ``tasks`` hold on each (as the controller computes it)."""
    out = []
    for w in workers:
        used = Resources()
        for t in tasks:
            if t.worker_id == w.worker_id:
                used = used + t.resources
        out.append(WorkerView(w.worker_id, w.capacity, used, w.attributes, w.schedulable))
    return out
