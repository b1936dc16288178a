"""GPUs in containers, with stand-ins: a fake ``nvidia-smi`` tells the worker it has four GPUs and
fake device nodes (``IRIS_DEVICE_DIR``) stand for ``/dev/nvidia<i>``. A task asking for two sees
exactly its own two nodes (and the control node) under ``/dev`` inside its container."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from iris.client import DeviceSpec, Entrypoint, IrisClient, JobState, LocalCluster, ResourceSpec
from iris.testing import container_engine as engines
from iris.testing.fake_devices import write_fake_gpu_nodes, write_fake_nvidia_smi
from iris.testing.images import BUSYBOX_IMAGE

pytestmark = pytest.mark.skipif(
    not engines.available() or os.geteuid() != 0, reason="needs dockerd and root (mknod)"
)


@pytest.fixture
def gpu_cluster(
    container_engine: engines.Engine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[LocalCluster]:
    bin_dir = tmp_path / "bin"
    write_fake_nvidia_smi(bin_dir, 4)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")  # the worker inherits it
    monkeypatch.setenv("IRIS_DEVICE_DIR", str(write_fake_gpu_nodes(tmp_path / "dev", 4)))
    with LocalCluster(
        workers=1, state_dir=tmp_path / "cluster", worker_cpu="4", worker_memory="4GB", tick_s=0.5
    ) as cluster:
        yield cluster


def test_a_task_sees_only_its_own_gpu_nodes_in_its_container(gpu_cluster: LocalCluster) -> None:
    with IrisClient(gpu_cluster.url) as client:
        job = client.submit(
            Entrypoint.from_command("sh", "-c", "echo gpus=$CUDA_VISIBLE_DEVICES; ls /dev | grep nvidia"),
            name="gpus",
            resources=ResourceSpec(cpu=0.5, memory="64MB", device=DeviceSpec(type="gpu", count=2)),
            image=BUSYBOX_IMAGE,
        )
        assert job.wait(timeout=90).state is JobState.SUCCEEDED, job.logs()
        lines = job.logs()
    gpus = lines[0].removeprefix("gpus=").split(",")
    assert len(gpus) == 2, lines
    assert sorted(lines[1:]) == sorted([f"nvidia{i}" for i in gpus] + ["nvidiactl"]), lines
