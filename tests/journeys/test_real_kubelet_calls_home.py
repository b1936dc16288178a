"""Journeys on the real node whose pods call the controller: a workspace bundle fetched by the
``fetch-bundle`` init container, Python callables whose values come back with ``Job.result()``
(one of them submits a sub-job from its pod),
and gangs whose ``gang-rendezvous`` init containers publish and find task 0's address (the job
model's bouncing gang and partly finished gang too).

The pods live in the real node's network namespace; the controller listens also on the host end
of its veth (``LocalCluster(pod_host=...)``, ``--also-listen``), by token only, and hands pods
that URL. Task pods run ``iris-test/python:3.11`` here (the init containers need a Python 3)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.journeys import test_job_model as job_model
from tests.journeys.harness import BOUNCING_GANG_SCRIPT, Journey, journey_cluster, run_bouncing_gang

from iris.client import CoschedulingConfig, Entrypoint, JobFailed, JobState, ResourceSpec
from iris.testing.control_plane.cluster import ControlPlane
from iris.testing.images import PYTHON_IMAGE

pytestmark = pytest.mark.real_kubelet
SMALL = ResourceSpec(cpu=0.25, memory="128MB")
IRIS = [sys.executable, "-m", "iris.cli.main"]


@pytest.fixture(scope="module")
def j(real_kubelet_plane: ControlPlane) -> Iterator[Journey]:
    with journey_cluster("real_kubelet", control_plane=real_kubelet_plane, image=PYTHON_IMAGE) as journey:
        yield journey


def _cli(j: Journey, cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "IRIS_CONTROLLER_URL": j.cluster.url, "IRIS_TOKEN": j.cluster.token or ""}
    return subprocess.run(
        [*IRIS, *args], cwd=cwd, capture_output=True, text=True, env=env, timeout=180, check=False
    )


def test_the_controller_serves_pods_by_token_only(j: Journey) -> None:
    """The pods' URL is the node's veth address, and it answers nobody without a token."""
    import httpx

    pod_url = str(j.cluster.ready_info["pod_controller_url"])
    assert pod_url.startswith("http://10.") and pod_url != j.cluster.url
    assert httpx.get(f"{pod_url}/api/v1/jobs", timeout=30).status_code == 401
    answer = httpx.get(
        f"{pod_url}/api/v1/jobs", headers={"Authorization": f"Bearer {j.cluster.token}"}, timeout=30
    )
    assert answer.status_code == 200


def test_iris_job_run_packages_the_workspace_and_the_task_imports_from_it(j: Journey, tmp_path: Path) -> None:
    (tmp_path / "mylib.py").write_text("ANSWER = 6 * 7\n")
    done = _cli(
        j,
        tmp_path,
        "job", "run", "--name", "workspace", "--cpu", "0.25", "--memory", "128",
        "--", "python", "-c", "import mylib; print('answer', mylib.ANSWER)",
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert "answer 42" in done.stdout, done.stdout


def _square_plus(x: int, plus: int = 0) -> int:
    return x * x + plus


def _raises() -> None:
    raise ValueError("no good on the node")


def test_a_callable_returns_its_value_from_a_pod(j: Journey) -> None:
    """The pod's python3 runs the runner with this machine's iris mounted (host_runner), and the
    runner posts the value back to the controller."""
    job = j.client.submit(Entrypoint.from_callable(_square_plus, 21, plus=1), name="square", resources=SMALL)
    assert job.result(timeout=120) == [442]
    failing = j.client.submit(Entrypoint.from_callable(_raises), name="raises", resources=SMALL)
    with pytest.raises(JobFailed, match="ValueError: no good on the node"):
        failing.result(timeout=120)


def _parent(x: int) -> list[int]:
    """Inside a pod: submit a sub-job with the task's own job token and wait for its value."""
    from iris.client import Entrypoint, ResourceSpec, iris_ctx

    ctx = iris_ctx()
    child = ctx.client.submit(
        Entrypoint.from_callable(_square_plus, x),
        name="child",
        resources=ResourceSpec(cpu=0.25, memory="128MB"),
    )
    return [*child.result(timeout=120), len(ctx.job_id)]


def test_a_callable_submits_a_sub_job_and_gets_its_value(j: Journey) -> None:
    job = j.client.submit(Entrypoint.from_callable(_parent, 5), name="parent", resources=SMALL)
    [value] = job.result(timeout=240)
    assert value == [25, len(job.job_id)]
    [child] = [s for s in j.client.list_jobs(limit=1000).jobs if s.job_id == f"{job.job_id}/child"]
    assert child.state is JobState.SUCCEEDED


def test_a_large_callable_is_fetched_by_the_pod(j: Journey) -> None:
    """Over what a pod object may carry: the bootstrap fetches it from the controller."""
    job = j.client.submit(Entrypoint.from_callable(len, b"x" * 1_500_000), name="big", resources=SMALL)
    assert job.result(timeout=120) == [1_500_000]


# Task 0 listens on the coordinator address the rendezvous gave it; task 1 connects to the
# address it was given and says hello: both saw the same address, and it leads to task 0's pod.
GANG_SCRIPT = """
import os, socket, time
address = os.environ["IRIS_COORDINATOR_ADDRESS"]
host, port = address.rsplit(":", 1)
print("rank", os.environ["IRIS_TASK_INDEX"], "coordinator", address, flush=True)
if os.environ["IRIS_TASK_INDEX"] == "0":
    server = socket.create_server(("", int(port)))
    server.settimeout(120)
    conn, _ = server.accept()
    print("coordinator got", conn.recv(100).decode(), flush=True)
else:
    deadline = time.monotonic() + 120
    while True:
        try:
            conn = socket.create_connection((host, int(port)), timeout=5)
            break
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)
    conn.sendall(b"hello from rank 1")
    conn.close()
"""


def test_a_gang_finds_its_coordinator_through_the_controller(j: Journey) -> None:
    job = j.client.submit(
        Entrypoint.from_command("python3", "-c", GANG_SCRIPT),
        name="gang",
        replicas=2,
        resources=SMALL,
        coscheduling=CoschedulingConfig(group_by="pool"),
    )
    detail = job.wait(timeout=180)
    logs = job.logs()
    assert detail.state is JobState.SUCCEEDED, (logs, j.attempt_history())
    seen = {line.split("coordinator ", 1)[1] for line in logs if line.startswith("rank ")}
    assert len(seen) == 1, logs  # both members were given the same address
    [address] = seen
    assert address.startswith("10."), address  # task 0's pod IP on the node's pod network
    assert "coordinator got hello from rank 1" in logs, logs


# ----- the job model's gangs, unchanged from the other substrates ---------------------------------


def test_gang_bounces_together_on_a_retryable_failure(j: Journey) -> None:
    # The member Iris stops is a shell as the container's PID 1, which ignores an untrapped
    # SIGTERM: trapped, or the kubelet waits the pod's whole grace period (30 s) before SIGKILL.
    script = BOUNCING_GANG_SCRIPT.replace("sleep 30;", "trap 'exit 143' TERM; sleep 30 & wait;")
    assert script != BOUNCING_GANG_SCRIPT
    detail = run_bouncing_gang(j, "gang-neutral", job_model.SMALL, script)
    assert detail.state is JobState.SUCCEEDED


def test_gang_member_that_already_succeeded_stays_done(j: Journey) -> None:
    job_model.test_gang_member_that_already_succeeded_stays_done(j)
