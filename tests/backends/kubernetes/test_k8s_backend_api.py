"""KubernetesBackend over real HTTP against the fake API server, the test playing kubelet.

Nothing but the API server runs here, so every state change in the store is either the
backend's write or the test's: that makes "no writes" exactly checkable.
"""

from __future__ import annotations

import base64
import json
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from k8s_sandbox_helpers import FakeCluster, fake_cluster, run, run_spec, stop, wait_for

from iris.cluster.backends.kubernetes import KubernetesBackend, KubernetesBackendConfig
from iris.cluster.backends.kubernetes.naming import pod_name
from iris.cluster.controller.backend import TaskTarget
from iris.rpc.enums import PriorityBand, TaskState
from iris.rpc.errors import InvalidArgument, NotFound, Unavailable
from iris.testing.fake_apiserver import PODS, SECRETS, utc_timestamp

UID_A, UID_B = "aaaaaaaaaaaaaaaa", "bbbbbbbbbbbbbbbb"


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[FakeCluster]:
    with fake_cluster(tmp_path) as c:
        yield c


def make_backend(cluster: FakeCluster, backend_id: str = "k8s-test", **config: object) -> KubernetesBackend:
    settings = {"kubeconfig": str(cluster.kubeconfig), "namespace": "iris", **config}
    return KubernetesBackend(
        KubernetesBackendConfig(**settings), controller_url="http://controller:10000", backend_id=backend_id
    )


@pytest.fixture
def backend(cluster: FakeCluster) -> Iterator[KubernetesBackend]:
    b = make_backend(cluster)
    yield b
    b.close()


def running_status(start: str | None = None) -> dict:
    return {
        "phase": "Running",
        "conditions": [{"type": "PodScheduled", "status": "True", "lastTransitionTime": utc_timestamp()}],
        "containerStatuses": [
            {
                "name": "task",
                "ready": True,
                "restartCount": 0,
                "state": {"running": {"startedAt": start or utc_timestamp()}},
            }
        ],
    }


def test_reconcile_creates_labelled_pods_and_answers_each_attempt(
    cluster: FakeCluster, backend: KubernetesBackend
) -> None:
    spec = run_spec(UID_A, task="/alice/train/0", priority=PriorityBand.BATCH)
    observations = backend.reconcile([run(UID_A, spec), run(UID_B, run_spec(UID_B, task="/alice/train/1"))])
    assert [o.attempt_uid for o in observations] == [UID_A, UID_B]
    assert all(o.state is TaskState.ASSIGNED for o in observations)
    pod = cluster.pod(pod_name("/alice/train/0", UID_A))
    assert pod is not None
    labels = pod["metadata"]["labels"]
    assert labels["iris.managed"] == "true" and labels["iris.backend_id"] == "k8s-test"
    assert labels["iris.attempt_uid"] == UID_A and labels["iris.job_id"] == "alice.train"
    assert labels["kueue.x-k8s.io/queue-name"] == "iris"
    assert labels["kueue.x-k8s.io/priority-class"] == "iris-batch"
    # the API server's priority admission resolved the band's PriorityClass from the manifests
    assert pod["spec"]["priorityClassName"] == "iris-batch" and pod["spec"]["priority"] == 10
    assert pod["metadata"]["annotations"]["iris.task_id"] == "/alice/train/0"
    assert len(cluster.pods()) == 2


def test_second_reconcile_writes_nothing(cluster: FakeCluster, backend: KubernetesBackend) -> None:
    desired = [run(UID_A, run_spec(UID_A))]
    backend.reconcile(desired)
    version = cluster.server.store.resource_version
    again = backend.reconcile(desired)  # the spec is still sent: the attempt was never seen past ASSIGNED
    assert again[0].state is TaskState.ASSIGNED
    backend.reconcile([run(UID_A)])
    assert cluster.server.store.resource_version == version


def test_states_follow_the_pod(cluster: FakeCluster, backend: KubernetesBackend) -> None:
    name = pod_name("/alice/train/0", UID_A)
    backend.reconcile([run(UID_A, run_spec(UID_A))])
    cluster.set_status(name, running_status("2024-01-01T00:00:00Z"), node="node-1")
    [obs] = backend.reconcile([run(UID_A)])
    assert obs.state is TaskState.RUNNING and obs.started_at == 1704067200.0
    cluster.set_status(
        name,
        {
            "phase": "Failed",
            "containerStatuses": [
                {
                    "name": "task",
                    "ready": False,
                    "restartCount": 0,
                    "state": {
                        "terminated": {"exitCode": 3, "reason": "Error", "finishedAt": "2024-01-01T00:01:00Z"}
                    },
                }
            ],
        },
    )
    [obs] = backend.reconcile([run(UID_A)])
    assert (obs.state, obs.exit_code, obs.error, obs.runtime_released) == (
        TaskState.FAILED,
        3,
        "exited with code 3",
        True,
    )
    assert obs.finished_at == 1704067260.0


def test_stop_deletes_and_reports_released_once_gone(
    cluster: FakeCluster, backend: KubernetesBackend
) -> None:
    name = pod_name("/alice/train/0", UID_A)
    backend.reconcile([run(UID_A, run_spec(UID_A))])
    cluster.set_status(name, running_status(), node="node-1")
    [obs] = backend.reconcile([stop(UID_A)])
    assert obs.state is TaskState.KILLED and not obs.runtime_released
    pod = cluster.pod(name)
    assert pod is not None and pod["metadata"]["deletionTimestamp"]  # graceful: the kubelet has to confirm
    version = cluster.server.store.resource_version
    [obs] = backend.reconcile([stop(UID_A)])
    assert not obs.runtime_released
    assert cluster.server.store.resource_version == version  # no second delete
    cluster.finish_deletion(name)
    [obs] = backend.reconcile([stop(UID_A)])
    assert obs.state is TaskState.KILLED and obs.runtime_released


def test_strays_are_deleted_and_finished_strays_kept_for_their_logs(
    cluster: FakeCluster, tmp_path: Path
) -> None:
    backend = make_backend(cluster, terminal_pod_retention_s=3600)
    other = make_backend(cluster, backend_id="someone-else")
    try:
        live, done = pod_name("/alice/train/0", UID_A), pod_name("/alice/train/1", UID_B)
        backend.reconcile([run(UID_A, run_spec(UID_A)), run(UID_B, run_spec(UID_B, task="/alice/train/1"))])
        other.reconcile([run("cccccccccccccccc", run_spec("cccccccccccccccc", task="/bob/x/0"))])
        cluster.set_status(done, {"phase": "Succeeded"})
        # a restarted controller no longer wants either attempt
        assert backend.reconcile([]) == []
        assert cluster.pod(live) is None  # unbound pods go at once
        assert cluster.pod(done) is not None  # kept: its logs stay readable
        assert cluster.pod(pod_name("/bob/x/0", "cccccccccccccccc")) is not None  # not ours
    finally:
        backend.close()
        other.close()


def test_expired_finished_strays_are_deleted(cluster: FakeCluster) -> None:
    backend = make_backend(cluster, terminal_pod_retention_s=0)
    try:
        name = pod_name("/alice/train/0", UID_A)
        backend.reconcile([run(UID_A, run_spec(UID_A))])
        cluster.set_status(name, {"phase": "Succeeded"})
        backend.reconcile([])
        assert cluster.pod(name) is None
    finally:
        backend.close()


def test_keep_for_a_vanished_pod_is_missing(cluster: FakeCluster, backend: KubernetesBackend) -> None:
    name = pod_name("/alice/train/0", UID_A)
    backend.reconcile([run(UID_A, run_spec(UID_A))])
    cluster.server.store.delete(PODS, "iris", name)
    [obs] = backend.reconcile([run(UID_A)])
    assert obs.state is TaskState.MISSING


def test_evicted_pod_is_worker_failed(cluster: FakeCluster, backend: KubernetesBackend) -> None:
    name = pod_name("/alice/train/0", UID_A)
    backend.reconcile([run(UID_A, run_spec(UID_A))])
    cluster.set_status(
        name,
        {
            "phase": "Failed",
            "reason": "Evicted",
            "message": "The node was low on resource: memory.",
            "conditions": [
                {
                    "type": "DisruptionTarget",
                    "status": "True",
                    "reason": "TerminationByKubelet",
                    "message": "low memory",
                }
            ],
        },
        node="node-1",
    )
    [obs] = backend.reconcile([run(UID_A)])
    assert obs.state is TaskState.WORKER_FAILED
    assert "TerminationByKubelet" in (obs.error or "")


def test_pagination_sees_every_pod(cluster: FakeCluster) -> None:
    backend = make_backend(cluster, list_page_size=2)
    try:
        uids = [f"{i:016x}" for i in range(7)]
        desired = [run(u, run_spec(u, task=f"/alice/train/{i}")) for i, u in enumerate(uids)]
        backend.reconcile(desired)
        version = cluster.server.store.resource_version
        observations = backend.reconcile([run(u) for u in uids])
        assert [o.state for o in observations] == [TaskState.ASSIGNED] * 7
        assert cluster.server.store.resource_version == version
    finally:
        backend.close()


def test_create_refused_by_admission_is_retried(cluster: FakeCluster) -> None:
    backend = make_backend(cluster, priority_classes={PriorityBand.INTERACTIVE: "no-such-class"})
    try:
        [obs] = backend.reconcile([run(UID_A, run_spec(UID_A))])
        assert obs.state is TaskState.ASSIGNED
        assert "could not create pod" in (obs.message or "") and "no-such-class" in (obs.message or "")
        assert cluster.pods() == []
    finally:
        backend.close()


def test_a_pod_created_earlier_is_adopted_on_conflict(cluster: FakeCluster) -> None:
    """409 on create: the pod exists (here made by a backend with another id); it is observed, not re-made."""
    first, second = make_backend(cluster, backend_id="one"), make_backend(cluster, backend_id="two")
    try:
        first.reconcile([run(UID_A, run_spec(UID_A))])
        [obs] = second.reconcile([run(UID_A, run_spec(UID_A))])
        assert obs.state is TaskState.ASSIGNED and obs.message == "waiting to be scheduled"
        assert len(cluster.pods()) == 1
    finally:
        first.close()
        second.close()


def test_logs_through_the_pods_log_api(cluster: FakeCluster, backend: KubernetesBackend) -> None:
    name = pod_name("/alice/train/0", UID_A)
    target = TaskTarget(attempt_uid=UID_A)
    backend.reconcile([run(UID_A, run_spec(UID_A))])
    early = backend.read_logs(target, "/alice/train/0")
    assert early.lines == [] and not early.complete
    cluster.set_status(name, running_status(), node="node-1")
    log = cluster.server.pod_logs.open(cluster.pod(name)["metadata"]["uid"], "task")
    for i in range(5):
        log.write_line(f"line {i}")
    page = backend.read_logs(target, "/alice/train/0", offset=1, limit=3)
    assert [line.line for line in page.lines] == ["line 1", "line 2", "line 3"]
    assert page.next_offset == 4 and not page.complete
    assert all(line.ts > 1.7e9 for line in page.lines)

    followed: list[str] = []
    stream = backend.follow_logs(target, "/alice/train/0")
    followed += [next(stream).line for _ in range(5)]
    log.write_line("late line")
    followed.append(next(stream).line)
    log.finish()
    cluster.set_status(name, {"phase": "Succeeded"})
    followed += [line.line for line in stream]
    assert followed == [f"line {i}" for i in range(5)] + ["late line"]
    rest = backend.read_logs(target, "/alice/train/0", offset=4)
    assert [line.line for line in rest.lines] == ["line 4", "late line"] and rest.complete


def test_logs_of_a_deleted_pod(cluster: FakeCluster, backend: KubernetesBackend) -> None:
    logs = backend.read_logs(TaskTarget(attempt_uid=UID_A), "/alice/train/0")
    assert logs.complete and logs.lines[0].stream == "system" and "no longer exists" in logs.lines[0].line


def test_task_rpcs_need_an_attempt_uid(backend: KubernetesBackend) -> None:
    with pytest.raises(InvalidArgument):
        backend.read_logs(TaskTarget(address="10.0.0.1:1"), "/alice/train/0")


def test_process_status_and_cluster_overview(cluster: FakeCluster, backend: KubernetesBackend) -> None:
    name = pod_name("/alice/train/0", UID_A)
    backend.reconcile([run(UID_A, run_spec(UID_A))])
    cluster.set_status(name, running_status(), node="node-1")
    status = backend.process_status(TaskTarget(attempt_uid=UID_A), "/alice/train/0")
    assert status["pod"] == name and status["phase"] == "Running" and status["node"] == "node-1"
    assert status["state"] == "RUNNING" and status["container_statuses"][0]["name"] == "task"
    assert isinstance(status["events"], list)
    with pytest.raises(NotFound):
        backend.process_status(TaskTarget(attempt_uid=UID_B), "/alice/train/0")
    overview = backend.cluster_overview()
    assert overview["pods"]["by_phase"] == {"Running": 1}
    assert overview["namespace"] == "iris" and "workloads" in overview and "nodes" in overview


def test_unreachable_api_server_raises_unavailable(tmp_path: Path) -> None:
    with fake_cluster(tmp_path) as c:
        backend = make_backend(c, request_timeout_s=2)
    try:
        with pytest.raises(Unavailable, match="cannot list pods"):
            backend.reconcile([run(UID_A)])
    finally:
        backend.close()


def test_follow_waits_for_a_pending_container(cluster: FakeCluster, backend: KubernetesBackend) -> None:
    name = pod_name("/alice/train/0", UID_A)
    backend.reconcile([run(UID_A, run_spec(UID_A))])
    stream = backend.follow_logs(TaskTarget(attempt_uid=UID_A), "/alice/train/0")
    got: list[str] = []
    reader = threading.Thread(target=lambda: got.extend(line.line for line in stream), daemon=True)
    reader.start()
    cluster.set_status(name, running_status(), node="node-1")
    log = cluster.server.pod_logs.open(cluster.pod(name)["metadata"]["uid"], "task")
    log.write_line("hello")
    wait_for(lambda: got == ["hello"], what="the followed line")
    log.finish()
    cluster.set_status(name, {"phase": "Succeeded"})
    reader.join(timeout=10)
    assert not reader.is_alive() and got == ["hello"]


def test_watch_wakes_the_controller_on_pod_changes(cluster: FakeCluster) -> None:
    backend = make_backend(cluster)
    other = make_backend(cluster, backend_id="someone-else")
    calls: list[float] = []
    try:
        backend.watch_changes(lambda: calls.append(1.0))
        other.reconcile([run(UID_B, run_spec(UID_B, task="/bob/x/0"))])  # not ours: no wake-up
        backend.reconcile([run(UID_A, run_spec(UID_A))])
        wait_for(lambda: len(calls) >= 1, what="a wake-up for the created pod")
        seen = len(calls)
        cluster.set_status(pod_name("/alice/train/0", UID_A), running_status(), node="node-1")
        wait_for(lambda: len(calls) > seen, what="a wake-up for the status change")
    finally:
        backend.close()
        other.close()
    watcher = backend._watcher
    assert watcher is not None
    wait_for(lambda: not watcher.is_alive(), timeout=15, what="the watcher to stop after close()")
    # only our pod's events: ADDED, binding MODIFIED, status MODIFIED
    assert len(calls) <= 3


def test_create_denied_by_a_webhook_fails_for_good(cluster: FakeCluster, backend: KubernetesBackend) -> None:
    """Kueue's validating webhook answers 403 with its reason: retrying the same pod cannot help."""
    from iris.testing.fake_apiserver import ApiError

    denial = (
        'admission webhook "vpod.kb.io" denied the request: metadata.labels[kueue.x-k8s.io/queue-name]:'
        ' Invalid value: "Team_Q": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters'
    )

    def deny(resource: object, obj: dict) -> None:
        if resource == PODS:
            raise ApiError(403, "Forbidden", denial)

    cluster.server.store.add_admission_hook(deny)
    [obs] = backend.reconcile([run(UID_A, run_spec(UID_A))])
    assert obs.state is TaskState.FAILED and obs.runtime_released
    assert obs.error == f"Kubernetes refused pod {pod_name('/alice/train/0', UID_A)}: {denial}"
    assert cluster.pods() == []


def test_a_missing_local_queue_fails_the_attempt(cluster: FakeCluster, backend: KubernetesBackend) -> None:
    """Kueue marks a Workload whose LocalQueue does not exist Inadmissible and waits for ever."""
    from iris.testing.fake_apiserver import WORKLOADS
    from iris.testing.kueue_sim.webhook import gate_queued_pods

    cluster.server.store.add_admission_hook(gate_queued_pods)  # Kueue's webhook: gate on create
    name = pod_name("/alice/train/0", UID_A)
    backend.reconcile([run(UID_A, run_spec(UID_A))])
    pod = cluster.pod(name)
    assert pod is not None
    workload = {
        "apiVersion": "kueue.x-k8s.io/v1beta1",
        "kind": "Workload",
        "metadata": {
            "name": "pod-" + name,
            "namespace": "iris",
            "ownerReferences": [
                {"apiVersion": "v1", "kind": "Pod", "name": name, "uid": pod["metadata"]["uid"]}
            ],
        },
        "spec": {"queueName": "iris", "podSets": []},
    }
    cluster.server.store.create(WORKLOADS, "iris", workload)
    reserved = {
        "type": "QuotaReserved",
        "status": "False",
        "reason": "Inadmissible",
        "message": "LocalQueue iris doesn't exist",
        "lastTransitionTime": utc_timestamp(),
    }
    cluster.server.store.update(
        WORKLOADS,
        "iris",
        "pod-" + name,
        lambda w: {**w, "status": {"conditions": [reserved]}},
        subresource="status",
    )
    obs = wait_for(
        lambda: next(o for o in backend.reconcile([run(UID_A)]) if o.state is TaskState.FAILED or None),
        what="the attempt to fail",
    )
    assert obs.runtime_released
    assert obs.error == f"Kueue will never admit pod {name}: LocalQueue iris doesn't exist"


def test_a_preempted_pod_already_gone_is_preempted(cluster: FakeCluster, backend: KubernetesBackend) -> None:
    """Kueue deletes a preempted plain pod and lets it go at once; its "Stopped" event remains."""
    from iris.testing.events import record_pod_event

    name = pod_name("/alice/train/0", UID_A)
    backend.reconcile([run(UID_A, run_spec(UID_A))])
    pod = cluster.pod(name)
    assert pod is not None
    message = (
        "Preempted to accommodate a workload (UID: 42, JobUID: 43) due to prioritization in the ClusterQueue"
    )
    record_pod_event(cluster.server.store, pod, "Normal", "Stopped", message, "kueue")
    record_pod_event(cluster.server.store, pod, "Normal", "Scheduled", "assigned to node-1", "scheduler")
    cluster.server.store.delete(PODS, "iris", name, grace_period_seconds=0)
    [obs] = backend.reconcile([run(UID_A), run(UID_B)])[:1]
    assert obs.state is TaskState.PREEMPTED and obs.runtime_released
    assert obs.error == f"preempted by Kueue: {message}"
    [other] = backend.reconcile([run(UID_B)])  # a pod that vanished without such an event is lost
    assert other.state is TaskState.MISSING


def test_the_job_token_and_secrets_live_in_a_secret_owned_by_the_pod(
    cluster: FakeCluster, backend: KubernetesBackend
) -> None:
    token = "iris-job.payload.signature"
    spec = run_spec(
        UID_A,
        env={"IRIS_TOKEN": token, "PLAIN": "v"},
        secret_env={"DB_PASSWORD": "hunter2"},
        bundle_id="ab" * 32,
    )
    (obs,) = backend.reconcile([run(UID_A, spec)])
    assert obs.state is TaskState.ASSIGNED
    name = pod_name("/alice/train/0", UID_A)
    pod = cluster.pod(name)
    assert pod is not None
    assert token not in json.dumps(pod) and "hunter2" not in json.dumps(pod)
    secret_name = f"{name}-env"
    (task,), (init,) = pod["spec"]["containers"], pod["spec"]["initContainers"]
    env = {e["name"]: e for e in task["env"]}
    assert env["PLAIN"]["value"] == "v"
    for key in ("IRIS_TOKEN", "DB_PASSWORD"):
        assert env[key]["valueFrom"] == {"secretKeyRef": {"name": secret_name, "key": key}}
    init_env = {e["name"]: e for e in init["env"]}
    assert init_env["IRIS_BUNDLE_TOKEN"]["valueFrom"] == {
        "secretKeyRef": {"name": secret_name, "key": "IRIS_TOKEN"}
    }
    secret = cluster.server.store.try_get(SECRETS, "iris", secret_name)
    assert secret is not None
    data = {k: base64.b64decode(v).decode() for k, v in secret["data"].items()}
    assert data == {"IRIS_TOKEN": token, "DB_PASSWORD": "hunter2"}
    (owner,) = secret["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["name"], owner["uid"]) == ("Pod", name, pod["metadata"]["uid"])
    # Without a credential, no Secret and no reference.
    backend.reconcile([run(UID_B, run_spec(UID_B, task="/alice/train/1"))])
    assert cluster.server.store.try_get(SECRETS, "iris", f"{pod_name('/alice/train/1', UID_B)}-env") is None
