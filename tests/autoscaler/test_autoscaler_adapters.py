"""From the controller's scheduler output to autoscaler input."""

from __future__ import annotations

from dataclasses import dataclass

from iris.cluster.controller.autoscaler import demand_from_requests, slice_usage_from_workers
from iris.cluster.controller.scheduler.model import PendingReason, ReasonCode, Resources, TaskRequest
from iris.rpc.models import Constraint


def test_demand_groups_tasks_by_job_and_keeps_gangs_whole() -> None:
    zone = (Constraint(key="zone", value="a"),)
    requests = [
        TaskRequest("/u/b/0", "/u/b", "u", Resources(2000, 10**9), zone),
        TaskRequest(
            "/u/g/0", "/u/g", "u", Resources(1000, 10**9, 0, "gpu", "h100", 8), group_by="slice", gang_size=2
        ),
        TaskRequest("/u/b/1", "/u/b", "u", Resources(2000, 10**9), zone),
        TaskRequest(
            "/u/g/1", "/u/g", "u", Resources(1000, 10**9, 0, "gpu", "h100", 8), group_by="slice", gang_size=2
        ),
    ]
    plain, gang = demand_from_requests(requests)
    assert (plain.job_id, plain.task_ids, plain.constraints, plain.is_gang) == (
        "/u/b",
        ("/u/b/0", "/u/b/1"),
        zone,
        False,
    )
    assert plain.resources.cpu_millicores == 2000 and plain.resources.device is None
    assert (gang.job_id, gang.gang_size, gang.group_by) == ("/u/g", 2, "slice")
    assert gang.resources.device is not None
    assert (gang.resources.device.type, gang.resources.device.variant, gang.resources.device.count) == (
        "gpu",
        "h100",
        8,
    )


@dataclass
class Worker:
    worker_id: str
    slice_id: str | None


def test_slice_usage_counts_busy_workers_per_slice() -> None:
    workers = [
        Worker("a-1-w0", "a-1"),
        Worker("a-1-w1", "a-1"),
        Worker("a-2-w0", "a-2"),
        Worker("manual", None),
    ]
    assert slice_usage_from_workers(workers, {"a-1-w1", "manual"}) == {"a-1": 1, "a-2": 0}


def test_tasks_waiting_for_the_next_pass_or_a_preemption_are_not_demand() -> None:
    requests = [TaskRequest(f"/u/j/{i}", "/u/j", "u", Resources(1000, 10**9)) for i in range(3)]
    pending = {
        "/u/j/0": PendingReason(ReasonCode.RESOURCES, "no room"),
        "/u/j/1": PendingReason(ReasonCode.QUEUED, "next pass"),
        "/u/j/2": PendingReason(ReasonCode.PREEMPTING, "victims exiting"),
    }
    (entry,) = demand_from_requests(requests, pending)
    assert entry.task_ids == ("/u/j/0",)
    assert demand_from_requests(requests[1:], pending) == []
