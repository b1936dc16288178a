"""Acceptance: GPUs and gangs on a real local cluster (controller + worker daemons on loopback).

The machine has no GPU: a fake ``nvidia-smi`` first on PATH tells each worker it has four.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.conftest import wait_until

from iris.client import (
    CoschedulingConfig,
    DeviceSpec,
    Entrypoint,
    IrisClient,
    JobState,
    LocalCluster,
    ResourceSpec,
)
from iris.testing.fake_devices import write_fake_nvidia_smi, write_fake_tpu_chips

# Each task prints its GPUs, then waits (bounded) until its sibling printed too: both hold their
# GPUs at the same moment, so disjointness is really tested.
TWO_GPU_TASK = (
    'echo "task $IRIS_TASK_INDEX of $IRIS_NUM_TASKS CUDA_VISIBLE_DEVICES=$CUDA_VISIBLE_DEVICES"; '
    'touch "$MARKS/$IRIS_TASK_INDEX"; '
    'for i in $(seq 600); do [ -e "$MARKS/0" ] && [ -e "$MARKS/1" ] && exit 0; sleep 0.1; done; exit 3'
)


@pytest.fixture
def fake_gpus(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    bin_dir = tmp_path / "bin"
    write_fake_nvidia_smi(bin_dir, 4)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")  # the workers inherit it
    return bin_dir


@pytest.fixture
def one_gpu_worker(tmp_path: Path, fake_gpus: Path) -> Iterator[LocalCluster]:
    with LocalCluster(
        workers=1, state_dir=tmp_path / "cluster", worker_cpu="4", worker_memory="4GB", tick_s=0.5
    ) as cluster:
        yield cluster


def gpus_by_task(lines: list[str]) -> dict[int, str]:
    found = {}
    for line in lines:
        match = re.search(r"task (\d+) of 2 CUDA_VISIBLE_DEVICES=([\d,]*)", line)
        if match:
            found[int(match.group(1))] = match.group(2)
    return found


def test_two_tasks_with_two_gpus_each_get_disjoint_gpus(one_gpu_worker: LocalCluster, tmp_path: Path) -> None:
    marks = tmp_path / "marks"
    marks.mkdir()
    with IrisClient(one_gpu_worker.url) as client:
        workers = client.workers().workers
        assert [w.capacity.device for w in workers] == [DeviceSpec(type="gpu", variant="a100", count=4)]
        job = client.submit(
            name="two-gpus",
            entrypoint=Entrypoint.from_command("sh", "-c", TWO_GPU_TASK),
            resources=ResourceSpec(cpu=0.5, memory="128MB", device=DeviceSpec(type="gpu", count=2)),
            replicas=2,
            env={"MARKS": str(marks)},
        )
        detail = job.wait(timeout=120)
        assert detail.state is JobState.SUCCEEDED, detail.error
        gpus = gpus_by_task(job.logs())
    assert set(gpus) == {0, 1}, gpus
    first, second = (set(gpus[i].split(",")) for i in (0, 1))
    assert len(first) == len(second) == 2 and first.isdisjoint(second), gpus
    assert first | second == {"0", "1", "2", "3"}


def test_cli_gpu_2_gives_two_tasks_disjoint_gpus(one_gpu_worker: LocalCluster, tmp_path: Path) -> None:
    marks = tmp_path / "marks"
    marks.mkdir()
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "iris.cli.main",
            "job",
            "run",
            "--name",
            "cli-gpus",
            "--gpu",
            "2",
            "--replicas",
            "2",
        ]
        + ["--cpu", "0.5", "--memory", "128", "--env", f"MARKS={marks}", "--", "sh", "-c", TWO_GPU_TASK],
        capture_output=True,
        text=True,
        env={**os.environ, "IRIS_CONTROLLER_URL": one_gpu_worker.url},
        timeout=180,
    )
    assert run.returncode == 0, run.stderr
    gpus = gpus_by_task(run.stdout.splitlines())
    assert set(gpus) == {0, 1}, run.stdout
    first, second = (set(gpus[i].split(",")) for i in (0, 1))
    assert len(first) == len(second) == 2 and first.isdisjoint(second), gpus


def gang_member() -> None:
    """Rank 0 serves on the coordinator address; every other rank dials it and says who it is."""
    import socket
    import time

    import iris.client

    d = iris.client.distributed(timeout=90)
    print(f"coordinator={d.coordinator_address} rank={d.process_id} of {d.num_processes}", flush=True)
    if d.process_id == 0:
        with socket.create_server(("", d.port)) as server:
            server.settimeout(90)
            heard = []
            for _ in range(d.num_processes - 1):
                conn, _ = server.accept()
                with conn:
                    heard.append(conn.recv(16).decode())
        print("rank 0 heard from ranks " + ",".join(sorted(heard)), flush=True)
        return
    deadline = time.monotonic() + 90
    while True:
        try:
            with socket.create_connection((d.host, d.port), timeout=5) as conn:
                conn.sendall(str(d.process_id).encode())
            return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def test_gang_of_four_agrees_on_one_coordinator_and_ranks_0_to_3(tmp_path: Path, fake_gpus: Path) -> None:
    with (
        LocalCluster(
            workers=4,  # a gang puts one task on each worker of a group (one host per process)
            state_dir=tmp_path / "cluster",
            worker_cpu="1",
            worker_memory="1GB",
            worker_attributes=[{"pool": "a"}] * 4,
            tick_s=0.5,
        ) as cluster,
        IrisClient(cluster.url) as client,
    ):
        job = client.submit(
            name="gang",
            entrypoint=Entrypoint.from_callable(gang_member),
            resources=ResourceSpec(cpu=0.25, memory="256MB", device=DeviceSpec(type="gpu", count=1)),
            replicas=4,
            coscheduling=CoschedulingConfig(group_by="pool"),
        )
        detail = job.wait(timeout=180)
        lines = job.logs()
        assert detail.state is JobState.SUCCEEDED, (detail.error, detail.tasks, lines)
    found = [re.search(r"coordinator=(\S+) rank=(\d+) of (\d+)", line) for line in lines]
    seen = [(m.group(1), int(m.group(2)), int(m.group(3))) for m in found if m]
    assert sorted(rank for _, rank, _ in seen) == [0, 1, 2, 3], lines
    assert len({coordinator for coordinator, _, _ in seen}) == 1, seen
    assert {count for _, _, count in seen} == {4}
    assert "rank 0 heard from ranks 1,2,3" in lines


def test_local_workers_split_the_machines_gpus(tmp_path: Path, fake_gpus: Path) -> None:
    with (
        LocalCluster(
            workers=2, state_dir=tmp_path / "cluster", worker_cpu="1", worker_memory="1GB"
        ) as cluster,
        IrisClient(cluster.url) as client,
    ):
        offered = {w.worker_id: w.capacity.device for w in client.workers().workers}
        assert offered == {f"worker-{i}": DeviceSpec(type="gpu", variant="a100", count=2) for i in (0, 1)}
        logs = {i: (tmp_path / "cluster" / "logs" / f"worker-{i}.log").read_text() for i in (0, 1)}
    assert "indices 0,1" in logs[0] and "indices 2,3" in logs[1]


def test_split_gpus_deals_contiguous_shares(fake_gpus: Path) -> None:
    from iris.cluster.worker.devices import split_gpus

    assert split_gpus(1) is None
    assert split_gpus(3) == ["0,1", "2", "3"]
    assert split_gpus(5) == ["0", "1", "2", "3", ""]
    assert split_gpus(2, {"CUDA_VISIBLE_DEVICES": "1,2,3"}) == ["1,2", "3"]


def test_cli_tpu_slice_of_two_hosts_runs_one_task_per_host_with_its_whole_host(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.worker.harness import start_worker

    write_fake_tpu_chips(tmp_path / "dev", 4)
    monkeypatch.setenv("PATH", f"{tmp_path / 'no-gpus'}{os.pathsep}{os.environ['PATH']}")
    for key, value in {
        "IRIS_DEVICE_DIR": str(tmp_path / "dev"),
        "TPU_ACCELERATOR_TYPE": "v5litepod-8",
        "TPU_CHIPS_PER_HOST_BOUNDS": "2,2,1",
        "TPU_WORKER_HOSTNAMES": "host-a,host-b",
    }.items():
        monkeypatch.setenv(key, value)
    with LocalCluster(workers=0, state_dir=tmp_path / "cluster", tick_s=0.5) as cluster:
        hosts = []
        try:
            for i in (0, 1):
                monkeypatch.setenv("TPU_WORKER_ID", str(i))  # each host of the slice knows its place
                hosts.append(
                    start_worker(
                        tmp_path,
                        cluster.url,
                        "--cpu",
                        "1",
                        "--memory",
                        "1GB",
                        worker_id=f"tpu-{i}",
                        wait_registered=False,
                    )
                )
            with IrisClient(cluster.url) as client:  # --tpu reads what the registered workers offer
                wait_until(lambda: len(client.workers().workers) == 2, what="both TPU hosts registered")
            script = (
                'echo "host $TPU_WORKER_ID task $IRIS_TASK_INDEX of $IRIS_NUM_TASKS chips $TPU_VISIBLE_CHIPS"'
            )
            run = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "iris.cli.main",
                    "job",
                    "run",
                    "--name",
                    "slice",
                    "--tpu",
                    "v5litepod-8",
                ]
                + ["--cpu", "0.5", "--memory", "128", "--no-workspace", "--", "sh", "-c", script],
                capture_output=True,
                text=True,
                env={**os.environ, "IRIS_CONTROLLER_URL": cluster.url},
                timeout=180,
            )
        finally:
            for host in hosts:
                host.stop()
    assert run.returncode == 0, run.stderr
    found = sorted(re.findall(r"host (\d) task (\d) of (\d) chips ([\d,]+)", run.stdout))
    assert len(found) == 2, run.stdout
    assert {h for h, _, _, _ in found} == {"0", "1"} and {t for _, t, _, _ in found} == {"0", "1"}
    assert all(n == "2" and chips == "0,1,2,3" for _, _, n, chips in found), found
