"""Fail fast when nothing could ever fit: the pure check, and submission through a real controller."""

from __future__ import annotations

from pathlib import Path

import pytest

from iris.cluster.config import ScaleGroupConfig
from iris.cluster.controller.backend import BackendDescriptor, BackendKind
from iris.cluster.controller.capacity import dry_run_from_groups, workers_misfit
from iris.cluster.controller.controller import create_controller
from iris.rpc.errors import InvalidArgument
from iris.rpc.models import (
    Constraint,
    CoschedulingConfig,
    DeviceSpec,
    Entrypoint,
    JobSpec,
    RegisterRequest,
    ResourceSpec,
)

SMALL = ResourceSpec(cpu=2, memory="4GB")
WORKERS = [
    ("w1", SMALL, {"zone": "a"}),
    ("w2", SMALL, {"zone": "b"}),
    (
        "w3",
        ResourceSpec(cpu=8, memory="16GB", device=DeviceSpec(type="gpu", variant="a100", count=2)),
        {"zone": "a"},
    ),
]


def test_a_job_some_worker_fits_is_accepted() -> None:
    assert workers_misfit(WORKERS, ResourceSpec(cpu=1, memory="1GB"), []) is None
    gpu = ResourceSpec(cpu=1, memory="1GB", device=DeviceSpec(type="gpu", count=1))
    assert workers_misfit(WORKERS, gpu, [Constraint(key="zone", value="a")]) is None


def test_no_worker_fits_says_why_per_worker() -> None:
    reason = workers_misfit(WORKERS, ResourceSpec(cpu=16, memory="1GB"), [])
    assert reason is not None
    assert reason.startswith("none of the 3 registered workers fits")
    assert "w1, w2: needs 16 cpu" in reason
    zone = workers_misfit(WORKERS, ResourceSpec(cpu=1), [Constraint(key="zone", value="c")])
    assert zone is not None and "constraint zone=c does not hold" in zone
    tpu = workers_misfit(WORKERS, ResourceSpec(cpu=1, device=DeviceSpec(type="tpu", count=4)), [])
    assert tpu is not None and "tpu" in tpu


def test_a_gang_needs_enough_slots_sharing_one_value() -> None:
    one_cpu = ResourceSpec(cpu=1, memory="1GB")
    assert workers_misfit(WORKERS, one_cpu, [], replicas=4, group_by="zone") is None  # zone a: 2 + 8 slots
    reason = workers_misfit(WORKERS, ResourceSpec(cpu=2, memory="1GB"), [], replicas=6, group_by="zone")
    assert (
        reason == "the gang needs 6 tasks on workers sharing one zone value; the most any value offers is 5"
    )


def test_nothing_registered_means_nothing_is_known() -> None:
    assert workers_misfit([], ResourceSpec(cpu=1000), []) is None


def _spec(**kw: object) -> JobSpec:
    return JobSpec.model_validate(
        {"name": "j", "entrypoint": Entrypoint.from_command("true"), "user": "u", **kw}
    )


def test_dry_run_answers_from_scale_groups() -> None:
    groups = [
        ScaleGroupConfig(name="small", resources=ResourceSpec(cpu=2, memory="4GB"), max_slices=4),
        ScaleGroupConfig(name="big", resources=ResourceSpec(cpu=32, memory="64GB"), max_slices=2),
    ]
    would, summary = dry_run_from_groups(_spec(resources=ResourceSpec(cpu=16, memory="8GB")), groups)
    assert would and "scale group big" in summary
    never, why = dry_run_from_groups(_spec(resources=ResourceSpec(cpu=64, memory="8GB")), groups)
    assert not never and why.startswith("no workers are running, and no scale group can ever run this job")


def test_submission_refuses_what_no_registered_worker_could_run(tmp_path: Path) -> None:
    controller = create_controller(
        BackendDescriptor(backend_id="t", kind=BackendKind.WORKER), state_dir=tmp_path
    )
    try:
        # No worker yet: nothing is known, the job waits.
        controller.submit(_spec(name="early", resources=ResourceSpec(cpu=64)))
        controller.register_worker(RegisterRequest(worker_id="w1", address="127.0.0.1:1", capacity=SMALL))
        with pytest.raises(
            InvalidArgument, match="no worker can ever run this job: none of the 1 registered"
        ):
            controller.submit(_spec(name="huge", resources=ResourceSpec(cpu=64)))
        with pytest.raises(InvalidArgument, match="--wait-for-capacity"):
            controller.submit(_spec(name="huge", resources=ResourceSpec(cpu=64)))
        assert controller.submit(_spec(name="huge", resources=ResourceSpec(cpu=64), wait_for_capacity=True))
        assert controller.submit(_spec(name="fits", resources=ResourceSpec(cpu=1, memory="1GB")))
        gang = _spec(name="gang", replicas=3, coscheduling=CoschedulingConfig(group_by="zone"))
        with pytest.raises(InvalidArgument, match="sharing one zone value"):
            controller.submit(gang)
        # The check follows the fleet: a big worker joins, then is reaped.
        big = ResourceSpec(cpu=64, memory="64GB")
        controller.register_worker(RegisterRequest(worker_id="w2", address="127.0.0.1:2", capacity=big))
        assert controller.submit(_spec(name="huge-now", resources=ResourceSpec(cpu=64)))
        controller.reap_worker("w2", "gone")
        with pytest.raises(InvalidArgument, match="none of the 1 registered"):
            controller.submit(_spec(name="huge-again", resources=ResourceSpec(cpu=64)))
    finally:
        controller.stop()
        controller.db.close()
