"""A gang's members get the JAX and torch.distributed variables from Iris, with no user code:
two tasks meet at MASTER_ADDR:MASTER_PORT (task 0 listens) and exchange their ranks. Two gangs at
once on one machine get different coordinator ports; a port another program holds fails the try."""

from __future__ import annotations

import socket
import sys
import time
from collections.abc import Iterator

import pytest

from iris.client import (
    CoschedulingConfig,
    Entrypoint,
    IrisClient,
    Job,
    JobState,
    LocalCluster,
    ResourceSpec,
    TaskState,
)
from iris.client.client import default_user
from iris.rpc.gang import gang_port


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


# Task 0 listens on MASTER_PORT and says so, then serves until it has met its gang's other member
# and been released by the test (a connection that sends "release"): so the coordinators of every
# gang the test starts hold their ports at the same time. Plain sockets: no torch import.
HOLD_AND_MEET = """
import os, socket, time
env = os.environ
rank, host, port, job = int(env["RANK"]), env["MASTER_ADDR"], int(env["MASTER_PORT"]), env["IRIS_JOB_ID"]
if rank == 0:
    with socket.create_server(("", port)) as server:
        print(f"listening on {port}", flush=True)
        server.settimeout(120)
        heard = []
        while "release" not in heard or len(heard) < 2:
            conn, _ = server.accept()
            with conn:
                heard.append(conn.recv(128).decode())
    print(f"coordinator of {job} met: {sorted(h for h in heard if h != 'release')}", flush=True)
else:
    deadline = time.monotonic() + 120
    while True:
        try:
            with socket.create_connection((host, port), timeout=5) as conn:
                conn.sendall(f"member of {job}".encode())
            break
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)
"""


def _submit_holder(client: IrisClient, name: str, **kwargs: object) -> Job:
    job = client.submit(
        Entrypoint.from_command(sys.executable, "-c", HOLD_AND_MEET),
        name=name,
        replicas=2,
        resources=ResourceSpec(cpu=1, memory="128MB"),
        coscheduling=CoschedulingConfig(group_by="pool"),
        **kwargs,  # type: ignore[arg-type]
    )
    assert job.job_id == f"/{default_user()}/{name}"  # the names were chosen for their job ids
    return job


def _listening(job: Job) -> int | None:
    for line in job.logs():
        if line.startswith("listening on "):
            return int(line.split()[-1])
    return None


def _release(port: int) -> None:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as conn:
        conn.sendall(b"release")


def _colliding_names() -> tuple[str, str]:
    """Two job names whose gangs' first generation derives the same port (the old choice)."""
    seen: dict[int, str] = {}
    user = default_user()
    for i in range(100_000):
        name = f"pair-{i}"
        port = gang_port(f"/{user}/{name}", 0)
        if port in seen:
            return seen[port], name
        seen[port] = name
    raise AssertionError("no two names share a derived port")


def test_two_gangs_at_once_on_the_same_workers_get_different_coordinator_ports(cluster: LocalCluster) -> None:
    """Each worker runs a member of both gangs, whose task 0 both run on one machine (every local
    worker is 127.0.0.1), and the job names derive the same port: the controller still gives the
    gangs different ones, and each coordinator meets its own gang's member."""
    first, second = _colliding_names()
    with IrisClient(cluster.url) as client:
        jobs = [_submit_holder(client, name) for name in (first, second)]
        deadline = time.monotonic() + 120
        while True:
            ports = [_listening(job) for job in jobs]
            ended = [job.job_id for job in jobs if job.detail().state.value not in ("PENDING", "RUNNING")]
            if all(ports) or ended or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        assert all(ports) and not ended, (ports, ended, [job.logs() for job in jobs])
        assert ports[0] != ports[1]
        for port in ports:
            assert port is not None
            _release(port)
        for job in jobs:
            detail = job.wait(timeout=120)
            assert detail.state is JobState.SUCCEEDED, job.logs()
            assert f"coordinator of {job.job_id} met: ['member of {job.job_id}']" in job.logs()


def test_a_coordinator_port_held_by_another_program_fails_the_try_and_the_retry_gets_another(
    cluster: LocalCluster,
) -> None:
    """The worker of task 0 checks that the gang's port is free on its machine before it starts
    the task: a port another program listens on fails that try with the reason; the gang's next
    generation gets another port and succeeds."""
    name = "held-port"
    port = gang_port(f"/{default_user()}/{name}", 0)
    with socket.create_server(("127.0.0.1", port)) as squatter, IrisClient(cluster.url) as client:
        job = _submit_holder(client, name, max_retries_failure=1)
        deadline = time.monotonic() + 120
        while (listening := _listening(job)) is None:
            assert job.detail().state.value in ("PENDING", "RUNNING"), job.logs()
            assert time.monotonic() < deadline, job.logs()
            time.sleep(0.1)
        assert squatter.fileno() >= 0  # still held while the gang's second try listens
        assert listening != port
        _release(listening)
        detail = job.wait(timeout=120)
    assert detail.state is JobState.SUCCEEDED, job.logs()
    first = detail.tasks[0].attempts[0]
    assert first.state is TaskState.FAILED, first
    assert f"the gang's coordinator port {port} is in use on this machine" in (first.error or ""), first
