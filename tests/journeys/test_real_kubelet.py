"""Journeys on a real node: the KUBERNETES backend against the real control plane whose one node is
a real kubelet with containerd (``real_kubelet_plane``). Task pods are real containers of the
local image ``iris-test/busybox:1``; exit codes, OOM kills, logs and exec come from the kubelet and
the runtime, not from our node agent. Pods that call the controller (bundles, callables, gangs):
tests/journeys/test_real_kubelet_calls_home.py. See tests/journeys/harness.py for the journeys that
stay on node-agent nodes (several nodes)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator

import pytest
from tests.journeys import test_job_model as job_model
from tests.journeys.harness import Journey, substrate_cluster

from iris.client import Entrypoint, JobState, ResourceSpec, TaskState
from iris.cluster.backends.kubernetes.naming import LABEL_JOB_ID, label_value

pytestmark = pytest.mark.real_kubelet
SMALL = job_model.SMALL
IRIS = [sys.executable, "-m", "iris.cli.main"]


@pytest.fixture(scope="module", params=[pytest.param("real_kubelet", marks=pytest.mark.real_kubelet)])
def j(request: pytest.FixtureRequest) -> Iterator[Journey]:
    with substrate_cluster(request) as journey:
        yield journey


def finished(j: Journey, job) -> object:  # noqa: ANN001
    return job_model.finished(j, job)


def job_pods(j: Journey, job) -> set[str]:  # noqa: ANN001
    assert j.kube is not None
    return {
        p["metadata"]["name"] for p in j.kube.items("pods", "-l", f"{LABEL_JOB_ID}={label_value(job.job_id)}")
    }


# ----- the job model, unchanged from the other substrates -----------------------------------------


def test_replicas_make_tasks(j: Journey) -> None:
    job_model.test_replicas_make_tasks(j)


def test_failure_is_retried_within_budget(j: Journey) -> None:
    job_model.test_failure_is_retried_within_budget(j)


def test_failure_without_budget_fails_the_job(j: Journey) -> None:
    job_model.test_failure_without_budget_fails_the_job(j)


def test_execution_timeout_fails_without_retry_and_stops_the_process(j: Journey) -> None:
    job_model.test_execution_timeout_fails_without_retry_and_stops_the_process(j)


# ----- what only a real node shows -----------------------------------------------------------------


def test_exec_and_process_status_through_the_real_api_server(j: Journey) -> None:
    """Exec goes controller -> API server -> kubelet -> containerd's stream server -> runc."""
    job = j.client.submit(
        Entrypoint.from_command("sh", "-c", "echo ready; sleep 60"), name="inspect", resources=SMALL
    )
    j.step(lambda: "ready" in job.logs(), what="task running")
    result = job.exec(["sh", "-c", "echo $IRIS_JOB_ID; cat /proc/1/cmdline | tr '\\0' ' '"])
    assert result.exit_code == 0, result
    job_id, cmdline = result.stdout.strip().splitlines()
    assert job_id == job.job_id
    assert "sleep 60" in cmdline  # the container's own PID 1: the task's shell
    failing = job.exec(["sh", "-c", "echo oops >&2; exit 3"])
    assert (failing.exit_code, failing.stderr.strip()) == (3, "oops")
    status = job.process_status()
    assert status["kind"] == "pod"
    assert status["phase"] == "Running"
    assert j.kube is not None
    node = j.kube.run("get", "nodes", "-o", "jsonpath={.items[0].status.nodeInfo.containerRuntimeVersion}")
    assert node.startswith("containerd://")
    job.kill()
    j.step(lambda: job.status() is JobState.KILLED, what="killed")


def test_oom_kill_by_the_memory_cgroup_is_reported_as_oom(j: Journey) -> None:
    # busybox tail keeps an unterminated "line" in memory: it grows until the cgroup kills it.
    job = j.client.submit(
        Entrypoint.from_command("sh", "-c", "echo eating; tail /dev/zero"),
        name="hungry",
        resources=ResourceSpec(cpu=0.5, memory="48MB"),
    )
    detail = j.step(lambda: finished(j, job), timeout=90, what="OOM-killed job done")
    assert detail.state is JobState.FAILED
    attempt = detail.tasks[0].attempts[0]
    assert attempt.exit_code == 137
    assert "OOMKilled" in (attempt.error or ""), attempt
    assert detail.failure_kind() == "oom"


def test_kill_stops_the_container_and_deletes_the_pod(j: Journey) -> None:
    # The task's shell is the container's PID 1, which ignores an untrapped SIGTERM: trap it, or
    # the kubelet waits the pod's whole grace period before its SIGKILL.
    script = "trap 'exit 143' TERM; echo up; sleep 300 & wait"
    job = j.client.submit(Entrypoint.from_command("sh", "-c", script), name="victim", resources=SMALL)
    j.step(lambda: "up" in job.logs(), what="task running")
    assert len(job_pods(j, job)) == 1
    job.kill()
    j.step(lambda: job.status() is JobState.KILLED, what="job killed")
    j.step(lambda: not job_pods(j, job), timeout=60, what="pod gone")


def test_pod_deleted_from_outside_is_an_infrastructure_failure(j: Journey) -> None:
    """``kubectl delete pod --wait=false``: the kubelet SIGTERMs the task (exit 143) and the pod
    fails before it goes; whatever Iris sees first, the attempt is lost to the infrastructure
    (WORKER_FAILED, retried on the preemption budget), never a job failure with exit 143."""
    assert j.kube is not None
    kube = j.kube
    job = j.client.submit(
        Entrypoint.from_command(
            "sh", "-c", "trap 'exit 143' TERM; echo \"attempt $IRIS_ATTEMPT_NUMBER\"; sleep 300 & wait"
        ),
        name="deleted",
        resources=SMALL,
    )
    j.step(lambda: "attempt 0" in job.logs(), what="first attempt running")
    [pod] = job_pods(j, job)
    kube.run("delete", "pod", pod, "--wait=false")

    def second_attempt_running() -> bool:
        task = job.detail().tasks[0]
        return len(task.attempts) >= 2 and task.attempts[-1].state is TaskState.RUNNING

    j.step(second_attempt_running, timeout=90, what="a second attempt running")
    first = job.detail().tasks[0].attempts[0]
    assert first.state is TaskState.WORKER_FAILED, first
    assert job.status() is not JobState.FAILED
    job.kill()
    j.step(lambda: job.status() is JobState.KILLED, what="killed")


def test_image_pull_failure_fails_with_kind_image(j: Journey) -> None:
    # No registry is reachable from the node's namespace: the pull fails at once (ErrImagePull);
    # the harness gives this substrate a 3 s image pull grace.
    job = j.client.submit(
        Entrypoint.from_command("true"),
        name="no-image",
        resources=SMALL,
        image="iris-test/no-such-image:1",
        max_retries_failure=0,
    )
    detail = j.step(lambda: finished(j, job), timeout=90, what="job failed on its image")
    assert detail.state is JobState.FAILED
    assert detail.failure_kind() == "image", detail.tasks[0].failure
    assert "iris-test/no-such-image:1" in (detail.tasks[0].attempts[0].error or "")


def test_logs_outlive_the_pod(j: Journey) -> None:
    """10,000 lines, exit 1, then the pod is deleted: the CLI still prints the tail and the failure
    from the controller's log store."""
    job = j.client.submit(
        Entrypoint.from_command(
            "sh",
            "-c",
            'i=0; while [ $i -lt 10000 ]; do echo "line $i"; i=$((i+1)); done; echo "giving up"; exit 1',
        ),
        name="chatty",
        resources=SMALL,
    )
    j.step(lambda: job.status() is JobState.FAILED, timeout=90, what="failed")

    def all_stored() -> bool:
        tail = job.query_logs(tail=1).lines
        return bool(tail) and tail[-1].line == "giving up"

    j.step(all_stored, timeout=30, what="the whole log in the controller's store")
    assert j.kube is not None
    kube = j.kube
    kube.run("delete", "pods", "-l", f"{LABEL_JOB_ID}={label_value(job.job_id)}", "--wait=true")
    assert not job_pods(j, job)
    env = {**os.environ, "IRIS_CONTROLLER_URL": j.cluster.url, "IRIS_TOKEN": j.cluster.token or ""}
    done = subprocess.run(
        [*IRIS, "job", "logs", job.job_id, "--tail", "3"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-3:] == ["line 9998", "line 9999", "giving up"], done.stdout
    assert len(job.query_logs(tail=20000).lines) == 10001
