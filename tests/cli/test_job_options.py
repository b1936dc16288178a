"""The parsers behind ``iris job run``'s flags: constraints, devices, sizes and durations."""

from __future__ import annotations

import pytest

from iris.cli.job_options import (
    did_you_mean,
    parse_constraint,
    parse_device,
    parse_duration,
    parse_gpu,
    parse_memory_mb,
    parse_tpu,
    tpu_request,
)
from iris.rpc.enums import ConstraintOp
from iris.rpc.models import DeviceSpec


@pytest.mark.parametrize(
    ("text", "key", "op", "value", "values"),
    [
        ("zone=a", "zone", ConstraintOp.EQ, "a", []),
        ("zone == a", "zone", ConstraintOp.EQ, "a", []),
        ("zone!=a", "zone", ConstraintOp.NE, "a", []),
        ("zone in (a,b)", "zone", ConstraintOp.IN, None, ["a", "b"]),
        ("zone in (a, 'b c')", "zone", ConstraintOp.IN, None, ["a", "b c"]),
        ("zone IN a,b", "zone", ConstraintOp.IN, None, ["a", "b"]),
        ("mem>=64", "mem", ConstraintOp.GE, "64", []),
        ("mem>64", "mem", ConstraintOp.GT, "64", []),
        ("mem<=1.5", "mem", ConstraintOp.LE, "1.5", []),
        ("mem<2", "mem", ConstraintOp.LT, "2", []),
        ("gpu", "gpu", ConstraintOp.EXISTS, None, []),
        ("!spot", "spot", ConstraintOp.NOT_EXISTS, None, []),
        ("taint:dedicated", "taint:dedicated", ConstraintOp.EXISTS, None, []),
        ("cloud.google.com/gke-spot=true", "cloud.google.com/gke-spot", ConstraintOp.EQ, "true", []),
    ],
)
def test_constraints(text: str, key: str, op: ConstraintOp, value: str | None, values: list[str]) -> None:
    c = parse_constraint(text)
    assert (c.key, c.op, c.value, c.values) == (key, op, value, values)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("mem>=lots", "compares numbers"),
        ("zone=", "no value"),
        ("zone in ()", "names no values"),
        ("zone not in (a)", "not supported"),
        ("=a", "is not a constraint"),
        ("a b c", "is not a constraint"),
    ],
)
def test_bad_constraints_say_why(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_constraint(text)


def test_did_you_mean_names_the_closest_value_or_lists_them() -> None:
    assert did_you_mean("us-east1-c", ["us-east1-b", "europe-west4-a"]) == "; did you mean us-east1-b?"
    assert did_you_mean("mars", ["a", "b"]) == "; workers advertise a, b"
    assert did_you_mean("x", []) == ""


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("90", 90),
        ("90s", 90),
        ("30m", 1800),
        ("1h", 3600),
        ("1h30m", 5400),
        ("2d", 172800),
        ("1:00:00", 3600),
        ("5:30", 330),
        ("1-02:00:00", 93600),
        ("0.5", 0.5),
    ],
)
def test_durations(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "soon", "0", "0s", "1:xx", "1y"])
def test_bad_durations(text: str) -> None:
    with pytest.raises(ValueError):
        parse_duration(text)


def test_memory_is_megabytes_unless_a_unit_says_otherwise() -> None:
    assert parse_memory_mb("512") == 512 * 1000**2
    assert parse_memory_mb("512B") == 512
    assert parse_memory_mb("2GB") == 2 * 1000**3
    assert parse_memory_mb("1Gi") == 1024**3
    with pytest.raises(ValueError):
        parse_memory_mb("lots")


def test_gpu_and_device_requests() -> None:
    assert parse_gpu("2") == DeviceSpec(type="gpu", variant="", count=2)
    assert parse_gpu("A100:4") == DeviceSpec(type="gpu", variant="a100", count=4)
    assert parse_device("gpu:h100:8") == DeviceSpec(type="gpu", variant="h100", count=8)
    assert parse_device("gpu:2") == DeviceSpec(type="gpu", variant="", count=2)
    assert parse_device("gpu:h100") == DeviceSpec(type="gpu", variant="h100", count=1)
    assert parse_device("tpu") == DeviceSpec(type="tpu", variant="", count=1)
    for bad in ("0", "a100", "a100:x", ":2"):
        with pytest.raises(ValueError):
            parse_gpu(bad)
    for bad in ("", "gpu:a:b:c", "gpu::2", "gpu:h100:x", "gpu:0"):
        with pytest.raises(ValueError):
            parse_device(bad)


def test_tpu_names() -> None:
    assert parse_tpu("v5litepod-16") == ("v5litepod", "16")
    assert parse_tpu("v4-2x2x1") == ("v4", "2x2x1")
    assert parse_tpu("v6e") == ("v6e", None)
    with pytest.raises(ValueError, match="not a TPU type"):
        parse_tpu("a100")


def _tpu_host(variant: str, chips: int, hosts: int, topology: str) -> tuple[DeviceSpec, dict[str, str]]:
    return DeviceSpec(type="tpu", variant=variant, count=chips), {
        "tpu-hosts": str(hosts),
        "tpu-topology": topology,
    }


def test_a_tpu_request_takes_every_chip_of_a_host_and_one_task_per_host() -> None:
    workers = [_tpu_host("v5litepod-16", 4, 4, "4x4"), _tpu_host("v5litepod-8", 8, 1, "2x4"), (None, {})]
    big = tpu_request("v5litepod-16", workers)
    assert (big.device, big.hosts, big.constraints) == (
        DeviceSpec(type="tpu", variant="v5litepod-16", count=4),
        4,
        [],
    )
    small = tpu_request("v5litepod-2x4", workers)
    assert small.device.variant == "v5litepod-8" and small.device.count == 8 and small.hosts == 1
    assert [c.describe() for c in small.constraints] == ["tpu-topology=2x4"]
    with pytest.raises(ValueError, match="did you mean v5litepod-8"):
        tpu_request("v5litepod-4", workers)
    with pytest.raises(ValueError, match="matches TPUs"):
        tpu_request("v5litepod", workers)
    with pytest.raises(ValueError, match="no worker offers a TPU"):
        tpu_request("v4-8", [(None, {})])
