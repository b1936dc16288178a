"""Resources and the fit rules: cpu, memory, disk and devices against free capacity."""

from __future__ import annotations

import pytest
from tests.controller.scheduler.scheduler_helpers import GB, placed, res, task, worker

from iris.cluster.controller.scheduler import Resources, schedule
from iris.rpc.models import DeviceSpec, ResourceSpec


def test_from_spec_reads_the_wire_model():
    spec = ResourceSpec(
        cpu=2, memory="4GB", disk="10GB", device=DeviceSpec(type="GPU", variant="H100", count=2)
    )
    assert Resources.from_spec(spec) == Resources(2000, 4 * GB, 10 * GB, "gpu", "h100", 2)


def test_from_spec_treats_a_cpu_device_as_no_accelerator():
    spec = ResourceSpec(cpu=1, memory="1GB", device=DeviceSpec(type="cpu", variant="cpu", count=1))
    assert Resources.from_spec(spec) == Resources(1000, GB, 0)


def test_add_sub_and_describe():
    a = res(2, 4, 10, ("gpu", "h100", 2))
    b = res(0.5, 1, 0, ("gpu", "h100", 1))
    assert a + b == res(2.5, 5, 10, ("gpu", "h100", 3))
    assert a - b == res(1.5, 3, 10, ("gpu", "h100", 1))
    assert a.describe() == "2 cpu, 4GB memory, 10GB disk, 2 gpu (h100)"
    assert Resources().describe() == "nothing"


@pytest.mark.parametrize(
    ("request_", "free", "fits"),
    [
        (res(1, 1), res(1, 1), True),
        (res(1.001, 1), res(1, 1), False),
        (res(1, 2), res(4, 1), False),
        (res(1, 1, 5), res(4, 4, 4), False),
        (res(1, 1, device=("gpu", "", 2)), res(4, 4, device=("gpu", "a100", 2)), True),
        (res(1, 1, device=("gpu", "h100", 1)), res(4, 4, device=("gpu", "a100", 8)), False),
        (res(1, 1, device=("gpu", "a100", 4)), res(4, 4, device=("gpu", "a100", 2)), False),
        (res(1, 1, device=("tpu", "", 1)), res(4, 4, device=("gpu", "", 8)), False),
        (res(1, 1), res(4, 4, device=("gpu", "a100", 8)), True),
    ],
)
def test_fits_table(request_, free, fits):
    assert request_.fits(free) is fits


@pytest.mark.parametrize(
    ("case", "worker_kwargs", "task_kwargs", "expected"),
    [
        ("cpu fits exactly", {"cpu": 2}, {"cpu": 2}, True),
        ("cpu too big", {"cpu": 2}, {"cpu": 3}, False),
        ("memory too big", {"mem": 8}, {"mem": 9}, False),
        ("disk too big", {"disk": 10}, {"disk": 11}, False),
        ("used cpu counts", {"cpu": 4, "used": res(3, 0)}, {"cpu": 2}, False),
        ("used memory counts", {"mem": 8, "used": res(0, 7)}, {"mem": 2}, False),
        ("device type must match", {"device": ("gpu", "a100", 8)}, {"device": ("tpu", "", 1)}, False),
        (
            "variant must match when named",
            {"device": ("gpu", "a100", 8)},
            {"device": ("gpu", "h100", 1)},
            False,
        ),
        ("any variant when not named", {"device": ("gpu", "a100", 8)}, {"device": ("gpu", "", 8)}, True),
        ("device count", {"device": ("gpu", "a100", 2)}, {"device": ("gpu", "a100", 3)}, False),
        (
            "used devices count",
            {"device": ("gpu", "a100", 4), "used": res(0, 0, 0, ("gpu", "a100", 3))},
            {"device": ("gpu", "a100", 2)},
            False,
        ),
        ("no device needed on a gpu worker", {"device": ("gpu", "a100", 4)}, {}, True),
        ("unschedulable worker", {"schedulable": False}, {}, False),
    ],
)
def test_fit_through_schedule(case, worker_kwargs, task_kwargs, expected):
    result = schedule([task("/u/j/0", **task_kwargs)], [worker("w", **worker_kwargs)])
    assert (placed(result) == {"/u/j/0": "w"}) is expected, case
    assert ("/u/j/0" in result.pending) is not expected, case


def test_tasks_placed_in_one_pass_use_up_free_capacity():
    tasks = [task(f"/u/j/{i}", cpu=1, mem=1) for i in range(6)]
    result = schedule(tasks, [worker("a", cpu=2), worker("b", cpu=3)])
    assert len(result.assignments) == 5
    per_worker = {}
    for _, w in result.assignments:
        per_worker[w] = per_worker.get(w, 0) + 1
    assert per_worker == {"a": 2, "b": 3}
    assert result.pending["/u/j/5"].code == "resources"


def test_overcommitted_worker_takes_nothing():
    over = worker("w", cpu=2, used=res(3, 0))
    result = schedule([task("/u/j/0", cpu=0, mem=0)], [over])
    assert result.assignments == []
