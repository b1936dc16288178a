"""Backend-neutral journeys: replicas, retries, sub-jobs, timeouts, endpoints — on WORKER, on
containers and on the real Kubernetes control plane (``real_k8s``), with the same assertions."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from tests.journeys.harness import (
    CONTAINER_IMAGE,
    WITH_CONTAINERS,
    Journey,
    run_bouncing_gang,
    substrate_cluster,
)

from iris.client import (
    CoschedulingConfig,
    Entrypoint,
    JobState,
    ResourceSpec,
    TaskState,
    iris_ctx,
)

SMALL = ResourceSpec(cpu=0.5, memory="64MB")


@pytest.fixture(scope="module", params=WITH_CONTAINERS)
def j(request: pytest.FixtureRequest) -> Iterator[Journey]:
    """The same stories on every substrate."""
    with substrate_cluster(request, attributes=[{"pool": "a"}] * 3) as journey:
        yield journey


def finished(j: Journey, job) -> object:  # noqa: ANN001
    detail = job.detail()
    return (
        detail
        if detail.state.value in ("SUCCEEDED", "FAILED", "KILLED", "WORKER_FAILED", "UNSCHEDULABLE")
        else None
    )


def test_replicas_make_tasks(j: Journey) -> None:
    job = j.client.submit(
        Entrypoint.from_command("sh", "-c", "echo task $IRIS_TASK_INDEX"),
        name="four",
        replicas=4,
        resources=SMALL,
    )
    detail = j.step(lambda: finished(j, job), what="4-replica job done")
    assert detail.state is JobState.SUCCEEDED
    assert [t.task_index for t in detail.tasks] == [0, 1, 2, 3]
    assert sorted(job.logs()) == ["task 0", "task 1", "task 2", "task 3"]
    if j.substrate == "container":  # each in the cluster's default image
        started = [line.line for line in job.read_logs()[0] if line.line.startswith("started ")]
        assert len(started) == 4 and all(f"in image {CONTAINER_IMAGE}" in s for s in started), started


def test_failure_is_retried_within_budget(j: Journey) -> None:
    script = 'if [ "$IRIS_ATTEMPT_NUMBER" = 0 ]; then echo flaky; exit 2; fi; echo ok'
    job = j.client.submit(
        Entrypoint.from_command("sh", "-c", script), name="flaky", max_retries_failure=1, resources=SMALL
    )
    detail = j.step(lambda: finished(j, job), what="flaky job done")
    assert detail.state is JobState.SUCCEEDED
    task = detail.tasks[0]
    assert [a.state for a in task.attempts] == [TaskState.FAILED, TaskState.SUCCEEDED]
    assert task.attempts[0].exit_code == 2
    assert task.failure_count == 1


def test_failure_without_budget_fails_the_job(j: Journey) -> None:
    job = j.client.submit(Entrypoint.from_command("sh", "-c", "exit 4"), name="no-budget", resources=SMALL)
    detail = j.step(lambda: finished(j, job), what="failing job done")
    assert detail.state is JobState.FAILED
    assert detail.exit_code == 4
    assert len(detail.tasks[0].attempts) == 1


def test_gang_bounces_together_on_a_retryable_failure(j: Journey) -> None:
    detail = run_bouncing_gang(j, "gang-neutral", SMALL)
    assert detail.state is JobState.SUCCEEDED


def fail_first_once_the_other_is_done() -> None:
    """Task 0's first attempt fails, but only once the controller says task 1 succeeded (a fixed
    sleep raced a slow pod start on a loaded node); every other attempt succeeds at once."""
    import sys
    import time

    from iris.client import TaskState, iris_ctx

    ctx = iris_ctx()
    if ctx.task_index != 0 or ctx.attempt_number != 0:
        return
    job = ctx.client.job(ctx.job_id)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and job.detail().tasks[1].state is not TaskState.SUCCEEDED:
        time.sleep(0.1)
    sys.exit(1)


def test_gang_member_that_already_succeeded_stays_done(j: Journey) -> None:
    # Task 1 finishes at once; task 0 fails after it and retries alone: done members are not rerun.
    job = j.client.submit(
        Entrypoint.from_callable(fail_first_once_the_other_is_done),
        name="gang-partial",
        replicas=2,
        resources=SMALL,
        coscheduling=CoschedulingConfig(group_by="pool"),
        max_retries_failure=1,
    )
    detail = j.step(lambda: finished(j, job), what="gang done")
    assert detail.state is JobState.SUCCEEDED
    assert [len(t.attempts) for t in detail.tasks] == [2, 1]


# Exec through the real API server needs SPDY at the kubelet, which the real plane's node agent
# does not serve: exec is proven here on the worker, the backend's exec call at its seam
# (tests/backends/kubernetes/test_k8s_backend_api.py) and on the real kubelet's substrate.
@pytest.mark.parametrize("j", ["worker"], indirect=True)
def test_exec_and_process_status_reach_the_running_task(j: Journey) -> None:
    job = j.client.submit(
        Entrypoint.from_command("sh", "-c", "echo ready; sleep 60"), name="inspect", resources=SMALL
    )
    j.step(lambda: "ready" in job.logs(), what="task running")
    result = job.exec(["sh", "-c", "echo $IRIS_JOB_ID"])
    assert result.exit_code == 0
    assert result.stdout.strip() == job.job_id
    status = job.process_status()
    if j.backend == "worker":
        assert status["kind"] == "process"
        assert any("sleep 60" in p["command"] for p in status["processes"])
    else:
        assert status["kind"] == "pod"
        assert status["phase"] == "Running"
    job.kill()


def test_execution_timeout_fails_without_retry_and_stops_the_process(j: Journey) -> None:
    job = j.client.submit(
        Entrypoint.from_command("sh", "-c", "echo started; sleep 60"),
        name="slowpoke",
        resources=SMALL,
        timeout=1,
        max_retries_failure=3,
    )
    detail = j.step(lambda: finished(j, job), timeout=60, what="job timed out")
    assert detail.state is JobState.FAILED
    task = detail.tasks[0]
    assert len(task.attempts) == 1  # a timeout is never retried, whatever the failure budget
    assert "timed out" in (task.error or "")
    j.step(lambda: all(a.finished_at for t in job.tasks() for a in t.attempts), what="process confirmed gone")


def spawn_child_then_wait() -> None:
    ctx = iris_ctx()
    ctx.client.submit(
        Entrypoint.from_command("sleep", "600"), name="child", resources=ResourceSpec(cpu=0.5, memory="64MB")
    )
    print("child submitted", flush=True)
    time.sleep(600)


def test_sub_job_lives_under_its_parent_and_dies_with_it(j: Journey) -> None:
    parent = j.client.submit(Entrypoint.from_callable(spawn_child_then_wait), name="parent", resources=SMALL)
    child_id = parent.job_id + "/child"
    j.step(lambda: child_id in parent.detail().children, what="child appears under parent")
    child = j.client.job(child_id)
    j.step(lambda: child.status() is JobState.RUNNING, what="child running")
    assert parent.kill() is JobState.KILLED
    detail = j.step(lambda: finished(j, child), what="child killed")
    assert detail.state is JobState.KILLED
    assert detail.error == "parent job terminated"
    j.step(
        lambda: all(a.finished_at for t in child.tasks() for a in t.attempts),
        what="child process confirmed gone",
    )


def test_scheduling_timeout_makes_an_unfittable_job_unschedulable(j: Journey) -> None:
    # Kueue's explanation reaches us on its next Workload read, so give Kubernetes a little longer.
    deadline = {"worker": 3, "container": 3}.get(j.substrate, 15)
    job = j.client.submit(
        Entrypoint.from_command("true"),
        name="huge",
        resources=ResourceSpec(cpu=1000, memory="64MB"),
        scheduling_timeout=deadline,
        wait_for_capacity=True,  # no worker could ever run it: it would be refused at once otherwise
    )
    j.step(lambda: "cpu" in (job.tasks()[0].pending_reason or ""), what="a pending reason naming cpu")
    detail = j.step(lambda: finished(j, job), timeout=30, what="job unschedulable")
    assert detail.state is JobState.UNSCHEDULABLE
    assert "cpu" in (detail.error or "")
    # Nothing is left running or gated: any attempt (a pod on Kubernetes) is taken back.
    j.step(lambda: all(a.finished_at for t in job.tasks() for a in t.attempts), what="attempts released")


def serve_endpoint() -> None:
    ctx = iris_ctx()
    ctx.register_endpoint("api", 8123)
    print("registered", flush=True)
    time.sleep(600)


def test_endpoints_resolve_in_the_namespace_and_vanish_with_the_job(j: Journey) -> None:
    job = j.client.submit(Entrypoint.from_callable(serve_endpoint), name="server", resources=SMALL)
    address = j.client.resolve_endpoint("api", job=job.job_id, timeout=30)
    assert address == "127.0.0.1:8123"
    assert j.client.endpoints(job="/someone/else").endpoints == []
    job.kill()
    j.step(lambda: not j.client.endpoints(job=job.job_id).endpoints, what="endpoint removed")
    assert j.checks > 0


def report_rank() -> None:
    import os

    import iris.client

    d = iris.client.distributed(timeout=60)
    index, count = os.environ["IRIS_TASK_INDEX"], os.environ["IRIS_NUM_TASKS"]
    print(
        f"rank {d.process_id} of {d.num_processes} (task {index} of {count}) coordinator {d.coordinator_address}"
    )


def test_a_gang_agrees_on_one_coordinator_through_distributed(j: Journey) -> None:
    job = j.client.submit(
        Entrypoint.from_callable(report_rank),
        name="dist",
        replicas=3,
        resources=SMALL,
        coscheduling=CoschedulingConfig(group_by="pool"),
    )
    detail = j.step(lambda: finished(j, job), timeout=120, what="gang done")
    lines = sorted(job.logs())
    why = [(t.task_id, t.state, t.failure, [(a.state, a.error) for a in t.attempts]) for t in detail.tasks]
    assert detail.state is JobState.SUCCEEDED, (lines, why)
    assert [line.split(" coordinator ")[0] for line in lines] == [
        f"rank {i} of 3 (task {i} of 3)" for i in range(3)
    ]
    assert len({line.split(" coordinator ")[1] for line in lines}) == 1, lines


GANG_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "NODE_RANK", "JAX_PROCESS_ID", "JAX_NUM_PROCESSES")


def gang_handshake() -> None:
    """Task 0 listens on MASTER_PORT; the others connect to MASTER_ADDR:MASTER_PORT and get an
    answer: the variables name a coordinator that really is task 0, with no user arguments."""
    import os
    import socket
    import time

    env = os.environ
    rank, host, port = int(env["RANK"]), env["MASTER_ADDR"], int(env["MASTER_PORT"])
    assert env["JAX_COORDINATOR_ADDRESS"] == f"{host}:{port}", env["JAX_COORDINATOR_ADDRESS"]
    if rank == 0:
        with socket.create_server(("", port)) as server:
            server.settimeout(120)
            for _ in range(int(env["WORLD_SIZE"]) - 1):
                conn, _ = server.accept()
                with conn:
                    conn.sendall(b"ack " + conn.recv(64))
        answer = "served"
    else:
        deadline = time.monotonic() + 120
        while True:
            try:
                with socket.create_connection((host, port), timeout=10) as conn:
                    conn.sendall(f"rank {rank}".encode())
                    answer = conn.recv(64).decode()
                    break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
    values = " ".join(f"{k}={env[k]}" for k in GANG_VARS)
    print(f"{values} {answer} coordinator {env['JAX_COORDINATOR_ADDRESS']}")


def test_a_gang_gets_torchrun_and_jax_variables_naming_task_0(j: Journey) -> None:
    job = j.client.submit(
        Entrypoint.from_callable(gang_handshake),
        name="gang-env",
        replicas=2,
        resources=SMALL,
        coscheduling=CoschedulingConfig(group_by="pool"),
    )
    detail = j.step(lambda: finished(j, job), timeout=150, what="gang done")
    lines = sorted(line for line in job.logs() if line.startswith("RANK="))
    why = [(t.task_id, t.state, [(a.state, a.error) for a in t.attempts]) for t in detail.tasks]
    assert detail.state is JobState.SUCCEEDED, (lines, why)
    ranks = [line.split(" coordinator ")[0] for line in lines]
    assert ranks == [
        "RANK=0 WORLD_SIZE=2 LOCAL_RANK=0 NODE_RANK=0 JAX_PROCESS_ID=0 JAX_NUM_PROCESSES=2 served",
        "RANK=1 WORLD_SIZE=2 LOCAL_RANK=0 NODE_RANK=1 JAX_PROCESS_ID=1 JAX_NUM_PROCESSES=2 ack rank 1",
    ], lines
    assert len({line.split(" coordinator ")[1] for line in lines}) == 1, lines


def double_it(x: int) -> int:
    return 2 * x


def test_a_callable_returns_its_value_through_result(j: Journey) -> None:
    """The runner posts the pickled return value (with the job token on a pod); result() reads it."""
    job = j.client.submit(Entrypoint.from_callable(double_it, 21), name="result", resources=SMALL)
    assert job.result(timeout=120) == [42]
