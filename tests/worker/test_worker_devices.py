"""A real worker daemon on a machine with four (fake) GPUs: it advertises them, gives each attempt
its own, and takes them back on every way an attempt ends, including a worker restart."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.conftest import wait_until
from tests.worker.harness import ControllerStub, WorkerProcess, start_worker

from iris.rpc.enums import TaskState
from iris.rpc.models import DesiredAttempt, DeviceSpec, Entrypoint, ResourceSpec, RunSpec
from iris.testing.fake_devices import write_fake_nvidia_smi, write_fake_tpu_chips

PRINT_GPUS = 'echo "gpus=${CUDA_VISIBLE_DEVICES-unset} nvidia=${NVIDIA_VISIBLE_DEVICES-unset}"; exec sleep 60'


@pytest.fixture
def controller() -> Iterator[ControllerStub]:
    stub = ControllerStub().start()
    yield stub
    stub.stop()


@pytest.fixture
def gpu_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    bin_dir = tmp_path / "bin"
    write_fake_nvidia_smi(bin_dir, 4)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    return bin_dir


@pytest.fixture
def worker(tmp_path: Path, controller: ControllerStub, gpu_path: Path) -> Iterator[WorkerProcess]:
    proc = start_worker(tmp_path, controller.url, "--reregister-after", "30")
    yield proc
    proc.stop()


def gpu_spec(uid: str, gpus: int, script: str = PRINT_GPUS, index: int = 0) -> RunSpec:
    return RunSpec(
        attempt_uid=uid,
        attempt_number=0,
        job_id="/alice/train",
        task_id=f"/alice/train/{index}",
        task_index=index,
        entrypoint=Entrypoint.from_command("sh", "-c", script),
        resources=ResourceSpec(cpu=0, memory=0, device=DeviceSpec(type="gpu", count=gpus) if gpus else None),
        replicas=4,
    )


def run(spec: RunSpec | str) -> DesiredAttempt:
    if isinstance(spec, str):
        return DesiredAttempt(attempt_uid=spec, intent="run")
    return DesiredAttempt(attempt_uid=spec.attempt_uid, intent="run", spec=spec)


def log_text(worker: WorkerProcess, uid: str) -> str:
    answer = worker.http.get(f"/attempts/{uid}/logs", params={"offset": 0, "limit": 1000})
    answer.raise_for_status()
    return "\n".join(line["line"] for line in answer.json()["lines"])


def printed_gpus(worker: WorkerProcess, uid: str) -> str:
    def line() -> str | None:
        for text in log_text(worker, uid).splitlines():
            if text.startswith("gpus="):
                return text
        return None

    return wait_until(line, what=f"attempt {uid} to print its GPUs") or ""


def wait_state(
    worker: WorkerProcess, keep: list[DesiredAttempt], uid: str, *states: TaskState, released=False
):
    found = {}

    def reached() -> bool:
        obs = {o.attempt_uid: o for o in worker.reconcile(keep).observations}.get(uid)
        found["obs"] = obs
        return obs is not None and obs.state in states and (obs.runtime_released or not released)

    wait_until(reached, timeout=20, what=f"{uid} to reach {states}")
    return found["obs"]


def test_advertises_the_detected_gpus(controller: ControllerStub, worker: WorkerProcess) -> None:
    wait_until(lambda: controller.registrations, what="registration")
    reg = controller.registrations[-1]
    assert reg.capacity.device == DeviceSpec(type="gpu", variant="a100", count=4)
    assert reg.attributes["device-type"] == "gpu" and reg.attributes["device-variant"] == "a100"
    assert reg.attributes["gpu-name"] == "NVIDIA A100-SXM4-80GB"
    assert "offering 4 gpu devices (a100): indices 0,1,2,3" in worker.stderr()


def test_attempts_get_disjoint_gpus_released_on_exit_stop_and_zombie_kill(worker: WorkerProcess) -> None:
    a, b = gpu_spec("a", 2), gpu_spec("b", 2, index=1)
    worker.reconcile([run(a), run(b)])
    seen_a, seen_b = printed_gpus(worker, "a"), printed_gpus(worker, "b")
    gpus_a = set(seen_a.split()[0].removeprefix("gpus=").split(","))
    gpus_b = set(seen_b.split()[0].removeprefix("gpus=").split(","))
    assert len(gpus_a) == len(gpus_b) == 2 and gpus_a.isdisjoint(gpus_b), (seen_a, seen_b)
    assert f"nvidia={','.join(sorted(gpus_a))}" in seen_a

    # No GPU is free: a third attempt fails at once and says why.
    c = gpu_spec("c", 1, index=2)
    obs = wait_state(worker, [run("a"), run("b"), run(c)], "c", TaskState.FAILED)
    assert "only 0 of 4 are free" in (obs.error or "")

    # A task that asked for no GPU sees none.
    cpu = gpu_spec("cpu", 0, script='echo "gpus=${CUDA_VISIBLE_DEVICES-unset}"', index=3)
    worker.reconcile([run("a"), run("b"), run(cpu)])
    assert printed_gpus(worker, "cpu") == "gpus="

    # Zombie kill: "a" is no longer desired; once its tree is gone its GPUs go to "d".
    zombie_report = {o.attempt_uid: o for o in worker.reconcile([run("b")]).observations}
    assert "a" in zombie_report  # reported once as the zombie it is, then asked about by uid
    wait_state(worker, [run("b"), run("a")], "a", TaskState.KILLED, released=True)
    d = gpu_spec("d", 2, index=0)
    worker.reconcile([run("b"), run(d)])
    assert set(printed_gpus(worker, "d").split()[0].removeprefix("gpus=").split(",")) == gpus_a

    # Stop intent: "b" stopped, its GPUs go to "e".
    stop_b = DesiredAttempt(attempt_uid="b", intent="stop")
    wait_state(worker, [stop_b, run("d")], "b", TaskState.KILLED, released=True)
    e = gpu_spec("e", 2, script='echo "gpus=$CUDA_VISIBLE_DEVICES"', index=1)
    worker.reconcile([run("d"), run(e)])
    assert set(printed_gpus(worker, "e").removeprefix("gpus=").split(",")) == gpus_b

    # Exit: "e" exited by itself; all of its GPUs are free again for a 2-GPU attempt.
    wait_state(worker, [run("d"), run("e")], "e", TaskState.SUCCEEDED, released=True)
    f = gpu_spec("f", 2, index=1)
    worker.reconcile([run("d"), run(f)])
    assert set(printed_gpus(worker, "f").split()[0].removeprefix("gpus=").split(",")) == gpus_b


def test_a_restarted_worker_starts_with_every_gpu_free(
    tmp_path: Path, controller: ControllerStub, gpu_path: Path
) -> None:
    first = start_worker(tmp_path, controller.url, "--reregister-after", "30")
    first.reconcile([run(gpu_spec("a", 2)), run(gpu_spec("b", 2, index=1))])
    printed_gpus(first, "a")
    printed_gpus(first, "b")
    first.popen.send_signal(signal.SIGKILL)  # the worker's watchdog kills the attempts' trees
    first.popen.wait(timeout=10)
    first.http.close()
    second = start_worker(tmp_path, controller.url, "--reregister-after", "30")
    try:
        whole = gpu_spec("all", 4)
        second.reconcile([run(whole)])
        assert printed_gpus(second, "all").split()[0] == "gpus=0,1,2,3"
    finally:
        second.stop()


def test_device_flag_none_turns_detection_off(
    tmp_path: Path, controller: ControllerStub, gpu_path: Path
) -> None:
    proc = start_worker(tmp_path, controller.url, "--device", "none", "--reregister-after", "30")
    try:
        wait_until(lambda: controller.registrations, what="registration")
        reg = controller.registrations[-1]
        assert reg.capacity.device is None and "device-type" not in reg.attributes
    finally:
        proc.stop()


def test_a_tpu_host_gives_each_attempt_its_own_block_of_chips(
    tmp_path: Path, controller: ControllerStub, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_fake_tpu_chips(tmp_path / "dev", 4)
    monkeypatch.setenv("IRIS_DEVICE_DIR", str(tmp_path / "dev"))
    monkeypatch.setenv("TPU_ACCELERATOR_TYPE", "v5litepod-4")
    monkeypatch.setenv("TPU_CHIPS_PER_HOST_BOUNDS", "2,2,1")
    monkeypatch.setenv("PATH", f"{tmp_path / 'nothing'}{os.pathsep}{os.environ['PATH']}")
    proc = start_worker(tmp_path, controller.url, "--reregister-after", "30")
    try:
        wait_until(lambda: controller.registrations, what="registration")
        reg = controller.registrations[-1]
        if reg.capacity.device is not None and reg.capacity.device.type == "gpu":
            pytest.skip("this machine has a real nvidia-smi: GPUs win over TPUs")
        assert reg.capacity.device == DeviceSpec(type="tpu", variant="v5litepod-4", count=4)
        script = 'echo "gpus=$TPU_VISIBLE_CHIPS bounds=$TPU_CHIPS_PER_PROCESS_BOUNDS"; exec sleep 60'
        specs = []
        for i in range(2):
            spec = gpu_spec(f"t{i}", 0, script=script, index=i)
            specs.append(
                spec.model_copy(
                    update={
                        "resources": ResourceSpec(cpu=0, memory=0, device=DeviceSpec(type="tpu", count=2))
                    }
                )
            )
        proc.reconcile([run(s) for s in specs])
        seen = sorted(printed_gpus(proc, s.attempt_uid) for s in specs)
        assert seen == ["gpus=0,1 bounds=1,2,1", "gpus=2,3 bounds=1,2,1"]
    finally:
        proc.stop()
