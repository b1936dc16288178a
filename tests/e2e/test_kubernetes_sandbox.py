"""The KUBERNETES backend end to end: the real controller against our fake API server with Kueue and kubelet simulators."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.conftest import free_port, wait_until

from iris.client import CoschedulingConfig, Entrypoint, IrisClient, JobState, ResourceSpec, TaskState
from iris.rpc.errors import IrisError
from iris.testing.k8s_sandbox import Sandbox, start_sandbox

IRIS = [sys.executable, "-m", "iris.cli.main"]


class K8sCluster:
    def __init__(self, sandbox: Sandbox, url: str, workdir: Path) -> None:
        self.sandbox = sandbox
        self.url = url
        # An empty directory to run the CLI from: the repository (a uv project) would make every
        # job sync Iris's own lock in its pod.
        self.workdir = workdir
        self.client = IrisClient(url)
        self.env = {**os.environ, "IRIS_CONTROLLER_URL": url}

    def iris(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*IRIS, *args], capture_output=True, text=True, env=self.env, timeout=120, cwd=self.workdir
        )

    def kubectl_pods(self, selector: str = "iris.managed=true") -> list[dict]:
        out = subprocess.run(
            ["kubectl", "--kubeconfig", str(self.sandbox.kubeconfig_path), "get", "pods", "-l", selector, "-o", "json"],
            capture_output=True, text=True, check=True,
        )  # fmt: skip
        return json.loads(out.stdout)["items"]


@pytest.fixture(scope="module")
def k8s(tmp_path_factory: pytest.TempPathFactory) -> Iterator[K8sCluster]:
    root = tmp_path_factory.mktemp("k8s")
    with start_sandbox(root / "sandbox") as sandbox:
        port = free_port()
        argv = [*IRIS, "controller", "start", "--backend", "kubernetes", "--kubeconfig", str(sandbox.kubeconfig_path),
                "--port", str(port), "--state-dir", str(root / "controller"), "--tick", "0.5"]  # fmt: skip
        log = (root / "controller.log").open("ab")
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        (root / "workdir").mkdir()
        cluster = K8sCluster(sandbox, f"http://127.0.0.1:{port}", root / "workdir")

        def up() -> bool:
            try:
                return cluster.client.cluster_status().kind == "kubernetes"
            except IrisError:
                return False

        try:
            wait_until(up, timeout=60, what="kubernetes controller up")
            yield cluster
        finally:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=30)
            log.close()


def test_job_run_prints_output_through_the_pods_api(k8s: K8sCluster) -> None:
    run = k8s.iris("job", "run", "--name", "hi", "--cpu", "0.5", "--memory", "64MB", "--", "echo", "hi")
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "hi"
    failed = k8s.iris(
        "job", "run", "--name", "three", "--cpu", "0.5", "--memory", "64MB", "--", "sh", "-c", "exit 3"
    )
    assert failed.returncode == 3


def test_pods_carry_iris_and_kueue_labels(k8s: K8sCluster) -> None:
    job = k8s.client.submit(
        Entrypoint.from_command("true"), name="labelled", resources=ResourceSpec(cpu=0.5, memory="64MB")
    )
    assert job.wait(timeout=60).state is JobState.SUCCEEDED
    uid = job.tasks()[0].current_attempt_uid
    assert uid is not None
    pods = [p for p in k8s.kubectl_pods() if uid in p["metadata"]["name"]]
    assert len(pods) == 1
    labels = pods[0]["metadata"]["labels"]
    assert labels["iris.managed"] == "true"
    assert labels["iris.attempt_uid"] == uid
    assert labels["kueue.x-k8s.io/queue-name"] == "iris"
    assert labels["kueue.x-k8s.io/priority-class"] == "iris-interactive"
    assert pods[0]["metadata"]["annotations"]["iris.job_id"] == job.job_id
    assert pods[0]["spec"]["restartPolicy"] == "Never"


def test_gang_stays_gated_until_kueue_admits_all_members(k8s: K8sCluster) -> None:
    # The sandbox's queue has 12 cpu over 3 nodes of 4: the blocker leaves 1.5 cpu, the gang needs 3.
    blocker = k8s.client.submit(
        Entrypoint.from_command("sleep", "120"),
        name="blocker",
        replicas=3,
        resources=ResourceSpec(cpu=3.5, memory="64MB"),
    )
    wait_until(lambda: blocker.status() is JobState.RUNNING, timeout=60, what="blocker running")
    gang = k8s.client.submit(
        Entrypoint.from_command("true"), name="gang", replicas=3, resources=ResourceSpec(cpu=1, memory="64MB"),
        coscheduling=CoschedulingConfig(group_by="pool"),
    )  # fmt: skip

    def gated_members() -> list[dict]:
        pods = [
            p for p in k8s.kubectl_pods() if p["metadata"]["annotations"].get("iris.job_id") == gang.job_id
        ]
        return pods if len(pods) == 3 and all(p["spec"].get("schedulingGates") for p in pods) else []

    pods = wait_until(gated_members, timeout=60, what="three gated gang pods")
    groups = {p["metadata"]["labels"]["kueue.x-k8s.io/pod-group-name"] for p in pods}
    assert len(groups) == 1
    assert {p["metadata"]["annotations"]["kueue.x-k8s.io/pod-group-total-count"] for p in pods} == {"3"}
    wait_until(
        lambda: all("quota" in (t.pending_reason or "") for t in gang.tasks()),
        timeout=30,
        what="Kueue's reason shown",
    )
    assert gang.status() is JobState.PENDING
    blocker.kill()
    assert gang.wait(timeout=60).state is JobState.SUCCEEDED


def test_stop_deletes_the_pods(k8s: K8sCluster) -> None:
    job = k8s.client.submit(
        Entrypoint.from_command("sleep", "120"),
        name="to-stop",
        replicas=2,
        resources=ResourceSpec(cpu=0.5, memory="64MB"),
    )
    wait_until(lambda: job.status() is JobState.RUNNING, timeout=60, what="running")

    def ours() -> list[dict]:
        return [
            p for p in k8s.kubectl_pods() if p["metadata"]["annotations"].get("iris.job_id") == job.job_id
        ]

    assert len(ours()) == 2
    stop = k8s.iris("job", "stop", job.job_id)
    assert stop.returncode == 0 and "KILLED" in stop.stdout
    wait_until(lambda: not ours(), timeout=60, what="pods deleted")


def test_evicted_pod_is_retried_as_a_new_attempt_with_a_new_pod(k8s: K8sCluster) -> None:
    job = k8s.client.submit(
        Entrypoint.from_command("sh", "-c", 'if [ "$IRIS_ATTEMPT_NUMBER" = 0 ]; then sleep 120; fi; echo second'),
        name="evicted", resources=ResourceSpec(cpu=0.5, memory="64MB"),
    )  # fmt: skip
    wait_until(lambda: job.status() is JobState.RUNNING, timeout=60, what="running")
    first_uid = job.tasks()[0].current_attempt_uid
    assert first_uid is not None
    (first_pod,) = [p["metadata"]["name"] for p in k8s.kubectl_pods() if first_uid in p["metadata"]["name"]]
    k8s.sandbox.kueue.evict(first_pod, reason="Preempted", message="Preempted by a test")
    detail = job.wait(timeout=60)
    assert detail.state is JobState.SUCCEEDED
    attempts = detail.tasks[0].attempts
    # Kueue's preemption spends the preemption budget: no failure retry was needed (the job has
    # none). PREEMPTED whether the controller saw Kueue's TerminationTarget on the pod or, the pod
    # already gone, Kueue's "Stopped" event about it.
    assert [a.state for a in attempts] == [TaskState.PREEMPTED, TaskState.SUCCEEDED]
    assert "Preempted by a test" in (attempts[0].error or "")
    second_pods = [
        p["metadata"]["name"] for p in k8s.kubectl_pods() if attempts[1].attempt_uid in p["metadata"]["name"]
    ]
    assert second_pods and second_pods[0] != first_pod
    assert detail.tasks[0].preemption_count == 1 and detail.tasks[0].failure_count == 0


def test_cluster_status_and_no_worker_store(k8s: K8sCluster) -> None:
    status = k8s.iris("cluster", "status", "--json")
    data = json.loads(status.stdout)
    assert data["kind"] == "kubernetes" and data["capabilities"] == ["cluster"]
    workers = k8s.iris("worker", "list")
    assert workers.returncode == 1
    assert "no worker store" in workers.stderr
    overview = k8s.client.http.request("GET", "/api/v1/cluster/overview")
    assert overview


def test_workspace_bundle_is_fetched_by_the_init_container(k8s: K8sCluster, tmp_path: Path) -> None:
    (tmp_path / "helper.py").write_text('GREETING = "hello from the bundle"\n')
    (tmp_path / "main.py").write_text(
        "import os\nimport helper\nprint(helper.GREETING)\nprint(os.getcwd())\n"
    )
    job = k8s.client.submit(
        Entrypoint.from_command("python", "main.py"),
        name="bundled",
        resources=ResourceSpec(cpu=0.5, memory="128MB"),
        workspace=tmp_path,
    )
    detail = job.wait(timeout=60)
    assert detail.state is JobState.SUCCEEDED, detail.error
    lines = job.logs()
    assert lines[0] == "hello from the bundle"
    assert not lines[1].startswith(str(tmp_path))  # it ran from the pod's own workspace volume
    (pod,) = [p for p in k8s.kubectl_pods() if detail.tasks[0].current_attempt_uid in p["metadata"]["name"]]
    assert [c["name"] for c in pod["spec"]["initContainers"]] == ["fetch-bundle"]
