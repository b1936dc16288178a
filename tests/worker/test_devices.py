"""Device detection (fake nvidia-smi, fake TPU chip files) and the env each attempt gets."""

from __future__ import annotations

from pathlib import Path

import pytest

from iris.cluster.worker.device_allocator import DevicesUnavailable
from iris.cluster.worker.devices import (
    DeviceBroker,
    DeviceInventory,
    detect_gpus,
    detect_tpus,
    device_attributes,
    gpu_variant,
    parse_nvidia_smi,
    resolve_devices,
    run_nvidia_smi,
)
from iris.rpc.models import DeviceSpec, Entrypoint, ResourceSpec, RunSpec
from iris.testing.fake_devices import write_fake_nvidia_smi, write_fake_tpu_chips


def run_spec(uid: str, device: DeviceSpec | None) -> RunSpec:
    return RunSpec(
        attempt_uid=uid,
        attempt_number=0,
        job_id="/u/j",
        task_id="/u/j/0",
        task_index=0,
        entrypoint=Entrypoint.from_command("true"),
        resources=ResourceSpec(device=device),
    )


def test_parse_nvidia_smi_rows_and_odd_lines() -> None:
    text = (
        "0, NVIDIA A100-SXM4-80GB, 81920 MiB, GPU-aaa\n"
        "\n"
        "garbage line\n"
        "1, NVIDIA A100-SXM4-80GB, [N/A], GPU-bbb\n"
        "1, duplicate, 1 MiB, GPU-ccc\n"
        "x, bad index, 1 MiB, GPU-ddd\n"
    )
    gpus = parse_nvidia_smi(text)
    assert [(g.index, g.memory_mib, g.uuid) for g in gpus] == [(0, 81920, "GPU-aaa"), (1, None, "GPU-bbb")]


@pytest.mark.parametrize(
    ("name", "variant"),
    [
        ("NVIDIA A100-SXM4-80GB", "a100"),
        ("NVIDIA H100 80GB HBM3", "h100"),
        ("Tesla V100-SXM2-16GB", "v100"),
        ("NVIDIA GeForce RTX 4090", "rtx4090"),
        ("NVIDIA L4", "l4"),
        ("NVIDIA", ""),
    ],
)
def test_gpu_variant(name: str, variant: str) -> None:
    assert gpu_variant(name) == variant


def test_detects_four_gpus_from_a_fake_nvidia_smi(tmp_path: Path) -> None:
    smi = write_fake_nvidia_smi(tmp_path, 4)
    inventory = detect_gpus(str(smi))
    assert inventory is not None
    assert (inventory.type, inventory.variant, inventory.indices) == ("gpu", "a100", (0, 1, 2, 3))
    assert device_attributes(inventory) == {
        "device-type": "gpu",
        "device-variant": "a100",
        "gpu-name": "NVIDIA A100-SXM4-80GB",
        "gpu-memory-mib": "81920",
    }


def test_absent_failing_or_empty_nvidia_smi_means_no_gpus(tmp_path: Path) -> None:
    assert detect_gpus(str(tmp_path / "no-such-nvidia-smi")) is None
    failing = write_fake_nvidia_smi(tmp_path / "f", output="NVIDIA-SMI has failed\n", exit_code=9)
    assert run_nvidia_smi(str(failing)) is None
    assert detect_gpus(str(failing)) is None
    empty = write_fake_nvidia_smi(tmp_path / "e", output="No devices were found\n")
    assert detect_gpus(str(empty)) is None
    not_executable = tmp_path / "x" / "nvidia-smi"
    not_executable.parent.mkdir()
    not_executable.write_text("#!/bin/sh\n")
    assert detect_gpus(str(not_executable)) is None


def test_detects_tpu_chips_from_env_and_device_files(tmp_path: Path) -> None:
    write_fake_tpu_chips(tmp_path, 4)
    env = {
        "TPU_ACCELERATOR_TYPE": "v5litepod-16",
        "TPU_CHIPS_PER_HOST_BOUNDS": "2,2,1",
        "TPU_WORKER_ID": "1",
        "TPU_WORKER_HOSTNAMES": "h0,h1,h2,h3",
        "TPU_TOPOLOGY": "4x4",
    }
    inventory = detect_tpus(env, tmp_path)
    assert inventory is not None
    assert (inventory.type, inventory.variant, inventory.indices) == ("tpu", "v5litepod-16", (0, 1, 2, 3))
    assert inventory.chips_per_host_bounds == "2,2,1"
    attrs = device_attributes(inventory)
    assert attrs["tpu-worker-id"] == "1" and attrs["tpu-hosts"] == "4" and attrs["tpu-topology"] == "4x4"
    other_host = detect_tpus({**env, "TPU_WORKER_ID": "2"}, tmp_path)
    assert other_host is not None and other_host.attributes["tpu-slice"] == attrs["tpu-slice"]


def test_vfio_chips_and_no_tpu(tmp_path: Path) -> None:
    write_fake_tpu_chips(tmp_path / "v", 8, vfio=True)
    (tmp_path / "v" / "vfio" / "vfio").touch()  # the control node is not a chip
    inventory = detect_tpus({"TPU_ACCELERATOR_TYPE": "v6e-8"}, tmp_path / "v")
    assert inventory is not None and inventory.count == 8 and inventory.chips_per_host_bounds == "2,4,1"
    assert detect_tpus({}, tmp_path / "empty") is None
    assert detect_tpus({"TPU_ACCELERATOR_TYPE": "v4-8"}, tmp_path / "empty") is None


def test_flag_overrides_and_none(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write_fake_nvidia_smi(tmp_path, 4)
    monkeypatch.setenv("PATH", f"{tmp_path}:/usr/bin:/bin")
    flagged = resolve_devices(DeviceSpec(type="gpu", variant="a100", count=2), True, {}, tmp_path / "none")
    assert flagged is not None and flagged.indices == (0, 1) and flagged.attributes["gpu-name"]
    assert resolve_devices(None, False, {}, tmp_path) is None
    manual = resolve_devices(DeviceSpec(type="tpu", variant="v4-8", count=4), False, {}, tmp_path)
    assert manual is not None and manual.indices == (0, 1, 2, 3) and manual.chips_per_host_bounds == "2,2,1"


def test_gpu_attempts_get_disjoint_cuda_visible_devices() -> None:
    broker = DeviceBroker(DeviceInventory("gpu", "a100", (0, 1, 2, 3)))
    a = broker.acquire(run_spec("a", DeviceSpec(type="gpu", count=2)))
    b = broker.acquire(run_spec("b", DeviceSpec(type="GPU", count=2)))
    assert a["CUDA_VISIBLE_DEVICES"] == "0,1" and b["CUDA_VISIBLE_DEVICES"] == "2,3"
    assert a["NVIDIA_VISIBLE_DEVICES"] == "0,1" and a["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"
    cpu_only = broker.acquire(run_spec("c", None))
    assert cpu_only["CUDA_VISIBLE_DEVICES"] == "" and cpu_only["NVIDIA_VISIBLE_DEVICES"] == "void"
    with pytest.raises(DevicesUnavailable):
        broker.acquire(run_spec("d", DeviceSpec(type="gpu", count=1)))
    with pytest.raises(DevicesUnavailable, match="needs tpu devices"):
        broker.acquire(run_spec("e", DeviceSpec(type="tpu", count=1)))
    broker.release("a")
    assert broker.acquire(run_spec("d", DeviceSpec(type="gpu", count=1)))["CUDA_VISIBLE_DEVICES"] == "0"


def test_tpu_subset_gets_its_own_single_host_slice_and_whole_host_keeps_platform_env() -> None:
    broker = DeviceBroker(DeviceInventory("tpu", "v5litepod-4", (0, 1, 2, 3), {}, "2,2,1"))
    first = broker.acquire(run_spec("a", DeviceSpec(type="tpu", count=2)))
    second = broker.acquire(run_spec("b", DeviceSpec(type="tpu", count=2)))
    assert first["TPU_VISIBLE_CHIPS"] == "0,1" and second["TPU_VISIBLE_CHIPS"] == "2,3"
    assert first["TPU_CHIPS_PER_PROCESS_BOUNDS"] == "1,2,1" and first["TPU_PROCESS_BOUNDS"] == "1,1,1"
    assert first["TPU_PROCESS_PORT"] != second["TPU_PROCESS_PORT"]
    assert first["TPU_PROCESS_ADDRESSES"] == f"localhost:{first['TPU_PROCESS_PORT']}"
    broker.release("a")
    broker.release("b")
    whole = broker.acquire(run_spec("c", DeviceSpec(type="tpu", count=4)))
    assert whole == {"TPU_VISIBLE_CHIPS": "0,1,2,3"}  # TPU_WORKER_ID etc. stay as the platform set them
    assert broker.acquire(run_spec("d", None)) == {}


def test_runtime_releases_devices_when_a_start_fails_and_when_an_attempt_exits(tmp_path: Path) -> None:
    from tests.runtime.helpers import make_spec, wait_done

    from iris.cluster.runtime import SubprocessRuntime

    broker = DeviceBroker(DeviceInventory("gpu", "a100", (0, 1)))
    runtime = SubprocessRuntime(
        tmp_path / "state", worker_id="w", controller_url="http://127.0.0.1:1", devices=broker
    )
    two = ResourceSpec(cpu=0, memory=0, device=DeviceSpec(type="gpu", count=2))
    try:
        missing = make_spec("/no/such/program", resources=two)
        runtime.start(missing)
        assert wait_done(runtime, missing.attempt_uid).state.value == "FAILED"
        assert broker.allocator.held() == {}  # the failed start gave its GPUs back
        ok = make_spec("sh", "-c", 'test "$CUDA_VISIBLE_DEVICES" = 0,1', resources=two)
        runtime.start(ok)
        snap = wait_done(runtime, ok.attempt_uid)
        assert (snap.state.value, snap.exit_code) == ("SUCCEEDED", 0)
        assert broker.allocator.held() == {}
        busy = make_spec("sleep", "30", resources=two)
        runtime.start(busy)
        refused = make_spec(
            "true", resources=ResourceSpec(cpu=0, memory=0, device=DeviceSpec(type="gpu", count=1))
        )
        runtime.start(refused)
        failed = wait_done(runtime, refused.attempt_uid)
        assert failed.state.value == "FAILED" and "only 0 of 2 are free" in (failed.error or "")
        assert list(broker.allocator.held()) == [busy.attempt_uid]
    finally:
        runtime.shutdown()
    assert broker.allocator.held() == {}  # shutdown killed "busy" and released its GPUs


def test_worker_config_device_none_and_device_dir() -> None:
    from iris.cluster.worker.config import build_worker_config

    off = build_worker_config(controller="http://c:1", device="none", environ={})
    assert off.device is None and not off.detect_devices
    flagged = build_worker_config(
        controller="http://c:1", device="tpu:v5litepod-8:8", environ={"IRIS_DEVICE_DIR": "/tmp/fake-dev"}
    )
    assert flagged.device == DeviceSpec(type="tpu", variant="v5litepod-8", count=8) and flagged.detect_devices
    assert flagged.device_dir == Path("/tmp/fake-dev")


def test_a_hanging_nvidia_smi_is_given_up_on(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import iris.cluster.worker.devices as devices

    monkeypatch.setattr(devices, "NVIDIA_SMI_TIMEOUT_S", 0.5)
    hanging = tmp_path / "nvidia-smi"
    hanging.write_text("#!/bin/sh\nexec sleep 30\n")
    hanging.chmod(0o755)
    assert run_nvidia_smi(str(hanging)) is None


def test_the_workers_own_visible_devices_limit_what_it_offers(tmp_path: Path) -> None:
    smi = write_fake_nvidia_smi(tmp_path / "bin", 4)
    half = detect_gpus(str(smi), "2,GPU-00000003-fake-0003-0000-000000000000")
    assert half is not None and half.indices == (2, 3)
    assert detect_gpus(str(smi), "") is None  # an empty list hides every GPU
    write_fake_tpu_chips(tmp_path / "dev", 4)
    env = {
        "TPU_ACCELERATOR_TYPE": "v5litepod-4",
        "TPU_CHIPS_PER_HOST_BOUNDS": "2,2,1",
        "TPU_VISIBLE_CHIPS": "2,3",
    }
    part = detect_tpus(env, tmp_path / "dev")
    assert part is not None and part.indices == (2, 3) and not part.whole_host
    both = DeviceBroker(part).acquire(run_spec("a", DeviceSpec(type="tpu", count=2)))
    assert both["TPU_VISIBLE_CHIPS"] == "2,3" and both["TPU_CHIPS_PER_PROCESS_BOUNDS"] == "1,2,1"
