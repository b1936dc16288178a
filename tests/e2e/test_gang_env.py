"""A gang's members get the JAX and torch.distributed variables from Iris, with no user code:
two tasks meet at MASTER_ADDR:MASTER_PORT (task 0 listens) and exchange their ranks."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator

import pytest

from iris.client import CoschedulingConfig, Entrypoint, IrisClient, JobState, LocalCluster, ResourceSpec


@pytest.fixture(scope="module")
def cluster() -> Iterator[LocalCluster]:
    with LocalCluster(workers=2, worker_cpu="2", worker_attributes=[{"pool": "a"}, {"pool": "a"}]) as lc:
        yield lc


def rendezvous() -> None:
    """What torch's env:// init does, in miniature: rank 0 serves, the others dial it."""
    import os

    from iris.client import distributed

    env = os.environ
    rank, size = int(env["RANK"]), int(env["WORLD_SIZE"])
    assert env["JAX_PROCESS_ID"] == env["NODE_RANK"] == str(rank) and env["LOCAL_RANK"] == "0"
    assert env["JAX_NUM_PROCESSES"] == str(size) == env["IRIS_NUM_TASKS"]
    assert rank == int(env["IRIS_TASK_INDEX"])
    address = (env["MASTER_ADDR"], int(env["MASTER_PORT"]))
    assert env["JAX_COORDINATOR_ADDRESS"] == f"{address[0]}:{address[1]}"
    assert distributed(timeout=1).coordinator_address == env["JAX_COORDINATOR_ADDRESS"]
    if rank == 0:
        with socket.create_server(address) as server:
            server.settimeout(120)
            conn, _ = server.accept()
            with conn:
                peer = conn.recv(16).decode()
                conn.sendall(b"0")
    else:
        deadline = time.monotonic() + 120
        while True:
            try:
                conn = socket.create_connection(address, timeout=5)
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
        with conn:
            conn.sendall(str(rank).encode())
            peer = conn.recv(16).decode()
    print(f"rank {rank} of {size} met rank {peer} at {address[0]}:{address[1]}", flush=True)


def test_a_two_task_gang_meets_at_the_coordinator_iris_chose(cluster: LocalCluster) -> None:
    with IrisClient(cluster.url) as client:
        _run_gang(client)


def _run_gang(client: IrisClient) -> None:
    job = client.submit(
        Entrypoint.from_callable(rendezvous),
        name="gang-env",
        replicas=2,
        resources=ResourceSpec(cpu=1, memory="128MB"),
        coscheduling=CoschedulingConfig(group_by="pool"),
    )
    detail = job.wait(timeout=180)
    text = "\n".join(job.logs())
    assert detail.state is JobState.SUCCEEDED, text
    assert "rank 0 of 2 met rank 1" in text and "rank 1 of 2 met rank 0" in text
    coordinators = {line.rsplit(" at ", 1)[1] for line in text.splitlines() if " met rank " in line}
    assert len(coordinators) == 1  # both dialled the same host:port
