"""A backend-neutral harness for journeys: a real cluster, a client, and invariants after every step.

Three substrates run the same journeys: ``worker`` (controller + worker daemons), ``container``
(the same, with ``defaults.task_image`` set: every task runs in the ``iris-test/python:3.11`` image
on the session's ``container_engine``) and ``real_k8s`` (the KUBERNETES backend against the real
kube-apiserver, scheduler, controller-manager and Kueue of the session's ``real_control_plane``,
pods on its node-agent nodes; marker ``real_k8s``).

A fourth, ``real_kubelet``, is the same real components with a real kubelet and containerd as the
only node (``real_kubelet_plane``; marker ``real_kubelet``; task pods run the local image
``iris-test/busybox:1``, or ``journey_cluster(image=...)``). The pods live in the node's own
network namespace and reach the controller on the host end of its veth: the cluster has a one-time
token and its controller listens also there (``LocalCluster(pod_host=...)``). Which journeys run
there: the job model (replicas, retries, a failure without budget), logs that outlive the pod,
OOM, execution timeout, kill, exec and process status, a pod deleted from outside, image pull
failure (tests/journeys/test_real_kubelet.py); and pods that call the controller, in
``iris-test/python:3.11``: a workspace bundle from ``iris job run``, callables with
``Job.result()`` (a large one fetched by its pod; one that submits a sub-job), a 2-task gang whose members find task 0's
address, the job model's bouncing and partly finished gangs
(tests/journeys/test_real_kubelet_calls_home.py). They stay on node-agent nodes
(``real_k8s``) when they need several nodes (constraints and pools across workers, preemption and
quota stories sized for four nodes, a gang failing three times, ``test_worker_scheduling``).

A journey reads as a story (submit -> run -> fail -> retry -> succeed) and calls ``step`` whenever
it waits, so the invariants are checked on every state the cluster passes through:
- no task has two active attempts at once;
- no worker is given more than its capacity;
- a finished task or job is never reopened.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Any, TypeVar

import pytest

from iris.client import CoschedulingConfig, Entrypoint, IrisClient, LocalCluster, ResourceSpec, TaskState
from iris.rpc.enums import ACTIVE_TASK_STATES, TERMINAL_JOB_STATES, TERMINAL_TASK_STATES
from iris.rpc.errors import NotImplementedForBackend
from iris.rpc.models import JobDetail
from iris.testing import container_engine as engines
from iris.testing.images import PYTHON_IMAGE

T = TypeVar("T")


KUBECTL = "kubectl"
SUBSTRATES = ("worker", "container", "real_k8s", "real_kubelet")
# Task pods on the real node run this locally built image (iris.testing.images; no registry).
REAL_KUBELET_IMAGE = "iris-test/busybox:1"
# Every task of the ``container`` substrate runs in this image (the cluster's defaults.task_image);
# its Python is the one journeys' commands call (``j.python``).
CONTAINER_IMAGE = PYTHON_IMAGE
# The container substrate, where dockerd is installed (.ci/run installs it).
CONTAINER: list[Any] = ["container"] if engines.available() else []
# The real control plane as a parameter (marker real_k8s, session fixture real_control_plane).
REAL_K8S: list[Any] = [pytest.param("real_k8s", marks=pytest.mark.real_k8s)]
# The one parametrisation of backend-neutral journeys: every substrate, the same assertions.
SUBSTRATE_PARAMS: list[Any] = ["worker", *REAL_K8S]
# ... and the same on containers: for the journeys whose paths differ in an image (job model, logs).
WITH_CONTAINERS: list[Any] = [*SUBSTRATE_PARAMS, *CONTAINER]


@dataclass
class Kube:
    """kubectl with admin rights on the cluster a KUBERNETES substrate runs on."""

    kubeconfig: Path
    namespace: str

    def run(self, *args: str) -> str:
        done = subprocess.run(
            [KUBECTL, "--kubeconfig", str(self.kubeconfig), "-n", self.namespace, *args],
            capture_output=True,
            text=True,
            timeout=60,
        )
        if done.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} failed: {done.stderr.strip()}")
        return done.stdout

    def items(self, kind: str, *args: str) -> list[dict[str, Any]]:
        return list(json.loads(self.run("get", kind, "-o", "json", *args))["items"])

    def pods(self) -> list[dict[str, Any]]:
        return self.items("pods", "-l", "iris.managed=true")

    def reserved_cpu(self) -> Fraction:
        """CPU the ClusterQueues hold for admitted workloads (Kueue's flavorsReservation)."""
        total = Fraction(0)
        for queue in self.items("clusterqueues"):
            for flavor in (queue.get("status") or {}).get("flavorsReservation") or []:
                for resource in flavor.get("resources") or []:
                    if resource.get("name") == "cpu":
                        total += _cpu(str(resource.get("total") or "0"))
        return total

    def clear(self, timeout: float = 90.0) -> None:
        """Delete every Iris pod of the namespace and wait until they and their Workloads are gone
        (other tests' pods and Workloads are left alone)."""
        ours = {p["metadata"]["name"] for p in self.pods()}
        self.run("delete", "pods", "-l", "iris.managed=true", "--wait=false", "--ignore-not-found")
        deadline = time.monotonic() + timeout
        left: list[str] = []
        while time.monotonic() < deadline:
            left = [p["metadata"]["name"] for p in self.pods()] + [
                w["metadata"]["name"]
                for w in self.items("workloads")
                if any(o.get("name") in ours for o in w["metadata"].get("ownerReferences") or [])
            ]
            if not left:
                return
            time.sleep(0.5)
        raise AssertionError(f"Iris pods or their Workloads still there after {timeout}s: {left}")


def _cpu(quantity: str) -> Fraction:
    return Fraction(quantity[:-1]) / 1000 if quantity.endswith("m") else Fraction(quantity)


@dataclass
class Journey:
    client: IrisClient
    cluster: LocalCluster
    backend: str
    # worker, container (worker daemons, every task in an image), real_k8s or real_kubelet
    substrate: str = "worker"
    kube: Kube | None = None
    finished_tasks: dict[str, str] = field(default_factory=dict)
    finished_jobs: dict[str, str] = field(default_factory=dict)
    checks: int = 0

    @property
    def python(self) -> str:
        """The Python a task's command calls: the image's in containers, else the test's own."""
        return "python3" if self.substrate == "container" else sys.executable

    def check_invariants(self) -> None:
        jobs = self.client.list_jobs(limit=1000).jobs
        for summary in jobs:
            if summary.job_id in self.finished_jobs:
                assert summary.state.value == self.finished_jobs[summary.job_id], (
                    f"job {summary.job_id} reopened"
                )
            elif summary.state in TERMINAL_JOB_STATES:
                self.finished_jobs[summary.job_id] = summary.state.value
            detail = self.client.job(summary.job_id).detail()
            for task in detail.tasks:
                active = [a for a in task.attempts if a.state in ACTIVE_TASK_STATES]
                assert len(active) <= 1, f"task {task.task_id} has {len(active)} active attempts"
                previous = self.finished_tasks.get(task.task_id)
                if previous is not None:
                    assert task.state.value == previous, (
                        f"task {task.task_id} reopened: {previous} -> {task.state}"
                    )
                elif task.state in TERMINAL_TASK_STATES:
                    self.finished_tasks[task.task_id] = task.state.value
        if self.backend == "worker":
            try:
                workers = self.client.workers().workers
            except NotImplementedForBackend:
                workers = []
            for w in workers:
                assert w.used.cpu_millicores <= w.capacity.cpu_millicores, (
                    f"{w.worker_id} over-committed on cpu"
                )
                assert w.used.memory_bytes <= w.capacity.memory_bytes, (
                    f"{w.worker_id} over-committed on memory"
                )
        self.checks += 1

    def cpu_capacity(self) -> Fraction:
        """What the cluster can run at once: the workers' CPUs, or the ClusterQueue's CPU quota."""
        if self.kube is None:
            return Fraction(sum(w.capacity.cpu_millicores for w in self.client.workers().workers), 1000)
        total = Fraction(0)
        for queue in self.kube.items("clusterqueues"):
            for group in (queue.get("spec") or {}).get("resourceGroups") or []:
                for flavor in group.get("flavors") or []:
                    for resource in flavor.get("resources") or []:
                        if resource.get("name") == "cpu":
                            total += _cpu(str(resource.get("nominalQuota")))
        return total

    def cpu_in_use(self) -> Fraction:
        """CPU still held: by attempts on workers, or by Workloads in Kueue's ClusterQueues."""
        if self.kube is None:
            return Fraction(sum(w.used.cpu_millicores for w in self.client.workers().workers), 1000)
        return self.kube.reserved_cpu()

    def stuck_pods(self) -> list[str]:
        """Pods being deleted that have not gone yet (Terminating), on KUBERNETES substrates."""
        if self.kube is None:
            return []
        return [p["metadata"]["name"] for p in self.kube.pods() if p["metadata"].get("deletionTimestamp")]

    def step(self, condition: Callable[[], T], *, timeout: float = 60.0, what: str = "condition") -> T:
        """Wait for ``condition``, checking the invariants on every poll."""
        deadline = time.monotonic() + timeout
        last: T | None = None
        while time.monotonic() < deadline:
            self.check_invariants()
            last = condition()
            if last:
                return last
            time.sleep(0.1)
        raise AssertionError(
            f"timed out after {timeout}s waiting for {what} (last: {last!r})\n{self.attempt_history()}"
        )

    def attempt_history(self) -> str:
        """Every attempt of every job, one line each: what a timed-out step's reader needs first."""
        lines = []
        for summary in self.client.list_jobs(limit=1000).jobs:
            for task in self.client.job(summary.job_id).detail().tasks:
                for a in task.attempts:
                    lines.append(
                        f"{task.task_id} attempt {a.attempt_number} on {a.worker_id}: {a.state.value}"
                        f" exit={a.exit_code} error={a.error!r} message={a.message!r}"
                    )
        return "\n".join(lines)


# Task 0 of a 2-task gang fails on its first attempt while task 1 still runs: the gang must bounce as one.
BOUNCING_GANG_SCRIPT = (
    'if [ "$IRIS_ATTEMPT_NUMBER" = 0 ]; then if [ "$IRIS_TASK_INDEX" = 0 ]; then sleep 0.3; exit 1; fi; sleep 30; fi;'
    " sleep 0.3"
)


def run_bouncing_gang(
    j: Journey, name: str, resources: ResourceSpec, script: str = BOUNCING_GANG_SCRIPT
) -> JobDetail:
    """Submit the bouncing gang and wait for it, checking on every poll that it is never split."""
    job = j.client.submit(
        Entrypoint.from_command("sh", "-c", script),
        name=name,
        replicas=2,
        resources=resources,
        coscheduling=CoschedulingConfig(group_by="pool"),
        max_retries_failure=1,
    )

    def never_split() -> JobDetail | None:
        detail = job.detail()
        states = {t.state for t in detail.tasks}
        assert not (TaskState.PENDING in states and states & {TaskState.RUNNING, TaskState.BUILDING}), (
            f"gang split: {states}"
        )
        return detail if detail.state in TERMINAL_JOB_STATES else None

    detail = j.step(never_split, what="gang done")
    assert [len(t.attempts) for t in detail.tasks] == [2, 2]
    assert detail.tasks[0].attempts[0].state is TaskState.FAILED
    assert detail.tasks[1].attempts[0].state is TaskState.COSCHED_FAILED
    return detail


@contextmanager
def substrate_cluster(request: pytest.FixtureRequest, **kwargs: Any) -> Iterator[Journey]:
    """``journey_cluster`` for a fixture parametrised by ``SUBSTRATE_PARAMS``."""
    substrate = str(request.param)
    control_plane = request.getfixturevalue("real_control_plane") if substrate == "real_k8s" else None
    if substrate == "real_kubelet":
        control_plane = request.getfixturevalue("real_kubelet_plane")
    if substrate == "container":
        request.getfixturevalue("container_engine")  # the engine up, the images loaded
    with journey_cluster(substrate, control_plane=control_plane, **kwargs) as journey:
        yield journey


@contextmanager
def journey_cluster(
    substrate: str,
    *,
    workers: int = 3,
    worker_cpu: str = "2",
    attributes: list[dict[str, str]] | None = None,
    control_plane: Any = None,
    image: str | None = None,
) -> Iterator[Journey]:
    """A cluster on ``substrate``; ``real_k8s`` needs the session's ``control_plane`` (its
    namespace is cleared of Iris pods before and after, so modules do not see each other's).
    ``image``: the pods' default image on ``real_kubelet`` (else ``REAL_KUBELET_IMAGE``)."""
    if substrate not in SUBSTRATES:
        raise ValueError(f"unknown substrate {substrate!r}")
    backend = "worker" if substrate in ("worker", "container") else "kubernetes"
    kube: Kube | None = None
    cluster_args: dict[str, Any] = {}
    config_dir = None
    if substrate == "container":
        config_dir = tempfile.TemporaryDirectory(prefix="iris-journey-")
        config = Path(config_dir.name) / "cluster.yaml"
        # A config's timings win over the command line's: the same as the other substrates'.
        config.write_text(
            f"defaults: {{task_image: {CONTAINER_IMAGE},"
            " worker: {reconcile_interval_s: 0.5, unreachable_grace_s: 8.0}}\n"
        )
        cluster_args = {"controller_args": ["--config", str(config)]}
    if substrate == "real_kubelet":
        # No registry answers the node: a pull fails at once, and 3 s of grace end the attempt.
        config = Path(control_plane.run_dir) / "iris-real-kubelet.yaml"
        config.write_text("backend:\n  kind: kubernetes\n  kubernetes:\n    image_pull_grace_s: 3\n")
        cluster_args = {
            "controller_args": ["--image", image or REAL_KUBELET_IMAGE, "--config", str(config)],
            # Pods reach the controller on the host end of the node's veth, by token only.
            "one_time_token": True,
            "pod_host": control_plane.real_node["node_ip"],
        }
    if substrate in ("real_k8s", "real_kubelet"):
        kube = Kube(Path(control_plane.admin_kubeconfig), control_plane.namespace)
        kube.clear()
        # The controller runs with its ServiceAccount's token: our RBAC meets the real authorizer.
        cluster_args |= {
            "kubeconfig": control_plane.controller_kubeconfig,
            "namespace": control_plane.namespace,
            "local_queue": control_plane.local_queue,
        }
    cluster = LocalCluster(
        workers=workers,
        backend=backend,
        worker_cpu=worker_cpu,
        worker_memory="4GB",
        worker_attributes=attributes,
        tick_s=0.5,
        worker_grace_s=8.0,  # fence after 4 s: a loaded machine may miss a round or two
        **cluster_args,
    )
    try:
        cluster.start()
    except BaseException:
        if config_dir is not None:
            config_dir.cleanup()
        raise
    client = IrisClient(cluster.url, token=cluster.token)
    try:
        yield Journey(client=client, cluster=cluster, backend=backend, substrate=substrate, kube=kube)
    finally:
        client.close()
        cluster.stop()
        if substrate in ("real_k8s", "real_kubelet") and kube is not None:
            kube.clear()
        if config_dir is not None:
            config_dir.cleanup()


@contextmanager
def kubernetes_cluster(control_plane: Any, root: Path, config_yaml: str) -> Iterator[tuple[IrisClient, Kube]]:
    """A KUBERNETES cluster on the real control plane, configured by ``config_yaml`` (written under
    ``root``, which also holds the state dir): a client and the namespace, cleared of Iris pods
    before and after."""
    config = root / "cluster.yaml"
    config.write_text(config_yaml)
    kube = Kube(Path(control_plane.admin_kubeconfig), control_plane.namespace)
    kube.clear()
    with LocalCluster(
        workers=0,
        state_dir=root / "state",
        backend="kubernetes",
        kubeconfig=control_plane.controller_kubeconfig,
        namespace=control_plane.namespace,
        local_queue=control_plane.local_queue,
        controller_args=["--config", str(config)],
    ) as cluster:
        with IrisClient(cluster.url) as client:
            yield client, kube
    kube.clear()
