"""KubernetesBackend at its own seam: an in-memory fake of ``KubeApi`` (fake_kube_api.py), the
test playing kube-scheduler, the kubelet and Kueue.

Nothing else writes to the fake, so every write it records is the backend's: "no writes" is
exactly checkable. What the real API server, scheduler, Kueue and garbage collector do with
those calls is tested against the real control plane (tests/journeys, tests/real_k8s and the
``real_k8s`` cases of test_k8s_attempt_secret.py and test_k8s_queue_refusals.py).
"""

from __future__ import annotations

import base64
import json
import subprocess
import threading
from collections.abc import Iterator

import pytest
from fake_kube_api import FakeKubeApi, utc_timestamp
from k8s_backend_helpers import run, run_spec, stop, wait_for

from iris.cluster.backends.kubernetes import KubernetesBackend, KubernetesBackendConfig
from iris.cluster.backends.kubernetes.api import ExecResult, KubeApiError
from iris.cluster.backends.kubernetes.naming import pod_name
from iris.cluster.controller.backend import AttemptRef, TaskTarget
from iris.cluster.controller.failure import IMAGE_ERROR_PREFIX
from iris.cluster.runtime.profiling import pod_profile_argv
from iris.rpc.enums import PriorityBand, TaskState
from iris.rpc.errors import InvalidArgument, NotFound, Unavailable
from iris.rpc.models import CoschedulingConfig, ExecRequest, ProfileRequest

UID_A, UID_B = "aaaaaaaaaaaaaaaa", "bbbbbbbbbbbbbbbb"
NAME_A = pod_name("/alice/train/0", UID_A)


@pytest.fixture
def api() -> FakeKubeApi:
    return FakeKubeApi()


def make_backend(api: FakeKubeApi, backend_id: str = "k8s-test", **config: object) -> KubernetesBackend:
    settings = {"kubeconfig": "/nonexistent/kubeconfig", "namespace": "iris", **config}
    return KubernetesBackend(
        KubernetesBackendConfig(**settings),
        controller_url="http://controller:10000",
        backend_id=backend_id,
        api_factory=api.factory,
    )


@pytest.fixture
def backend(api: FakeKubeApi) -> Iterator[KubernetesBackend]:
    b = make_backend(api)
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
    api: FakeKubeApi, backend: KubernetesBackend
) -> None:
    spec = run_spec(UID_A, task="/alice/train/0", priority=PriorityBand.BATCH)
    observations = backend.reconcile([run(UID_A, spec), run(UID_B, run_spec(UID_B, task="/alice/train/1"))])
    assert [o.attempt_uid for o in observations] == [UID_A, UID_B]
    assert all(o.state is TaskState.ASSIGNED for o in observations)
    pod = api.pods[NAME_A]
    labels = pod["metadata"]["labels"]
    assert labels["iris.managed"] == "true" and labels["iris.backend_id"] == "k8s-test"
    assert labels["iris.attempt_uid"] == UID_A and labels["iris.job_id"] == "alice.train"
    assert labels["kueue.x-k8s.io/queue-name"] == "iris"
    assert labels["kueue.x-k8s.io/priority-class"] == "iris-batch"
    assert pod["spec"]["priorityClassName"] == "iris-batch"
    assert pod["metadata"]["annotations"]["iris.task_id"] == "/alice/train/0"
    assert len(api.pods) == 2


def test_second_reconcile_writes_nothing(api: FakeKubeApi, backend: KubernetesBackend) -> None:
    desired = [run(UID_A, run_spec(UID_A))]
    backend.reconcile(desired)
    writes = list(api.writes)
    again = backend.reconcile(desired)  # the spec is still sent: the attempt was never seen past ASSIGNED
    assert again[0].state is TaskState.ASSIGNED
    backend.reconcile([run(UID_A)])
    assert api.writes == writes


def test_states_follow_the_pod(api: FakeKubeApi, backend: KubernetesBackend) -> None:
    backend.reconcile([run(UID_A, run_spec(UID_A))])
    api.set_status(NAME_A, running_status("2024-01-01T00:00:00Z"), node="node-1")
    [obs] = backend.reconcile([run(UID_A)])
    assert obs.state is TaskState.RUNNING and obs.started_at == 1704067200.0
    api.set_status(
        NAME_A,
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


def test_stop_deletes_and_reports_released_once_gone(api: FakeKubeApi, backend: KubernetesBackend) -> None:
    backend.reconcile([run(UID_A, run_spec(UID_A))])
    api.set_status(NAME_A, running_status(), node="node-1")
    [obs] = backend.reconcile([stop(UID_A)])
    assert obs.state is TaskState.KILLED and not obs.runtime_released
    assert api.pods[NAME_A]["metadata"]["deletionTimestamp"]  # graceful: the kubelet has to confirm
    writes = list(api.writes)
    [obs] = backend.reconcile([stop(UID_A)])
    assert not obs.runtime_released
    assert api.writes == writes  # no second delete
    api.finish_deletion(NAME_A)
    [obs] = backend.reconcile([stop(UID_A)])
    assert obs.state is TaskState.KILLED and obs.runtime_released


def test_strays_are_deleted_and_finished_strays_kept_for_their_logs(api: FakeKubeApi) -> None:
    backend = make_backend(api, terminal_pod_retention_s=3600)
    other = make_backend(api, backend_id="someone-else")
    try:
        done = pod_name("/alice/train/1", UID_B)
        backend.reconcile([run(UID_A, run_spec(UID_A)), run(UID_B, run_spec(UID_B, task="/alice/train/1"))])
        other.reconcile([run("cccccccccccccccc", run_spec("cccccccccccccccc", task="/bob/x/0"))])
        api.set_status(done, {"phase": "Succeeded"})
        # a restarted controller no longer wants either attempt
        assert backend.reconcile([]) == []
        assert NAME_A not in api.pods  # unbound pods go at once
        assert done in api.pods  # kept: its logs stay readable
        assert pod_name("/bob/x/0", "cccccccccccccccc") in api.pods  # not ours
    finally:
        backend.close()
        other.close()


def test_expired_finished_strays_are_deleted(api: FakeKubeApi) -> None:
    backend = make_backend(api, terminal_pod_retention_s=0)
    try:
        backend.reconcile([run(UID_A, run_spec(UID_A))])
        api.set_status(NAME_A, {"phase": "Succeeded"})
        backend.reconcile([])
        assert NAME_A not in api.pods
    finally:
        backend.close()


def test_keep_for_a_vanished_pod_is_missing(api: FakeKubeApi, backend: KubernetesBackend) -> None:
    backend.reconcile([run(UID_A, run_spec(UID_A))])
    api.remove_pod(NAME_A)
    [obs] = backend.reconcile([run(UID_A)])
    assert obs.state is TaskState.MISSING


def test_evicted_pod_is_worker_failed(api: FakeKubeApi, backend: KubernetesBackend) -> None:
    backend.reconcile([run(UID_A, run_spec(UID_A))])
    api.set_status(
        NAME_A,
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


def test_preempted_while_terminating_is_preempted_not_yet_released(
    api: FakeKubeApi, backend: KubernetesBackend
) -> None:
    """Kueue evicts: DisruptionTarget on the pod, which lingers through its grace period."""
    backend.reconcile([run(UID_A, run_spec(UID_A))])
    status = running_status()
    status["conditions"].append(
        {
            "type": "DisruptionTarget",
            "status": "True",
            "reason": "WorkloadEvictedDueToPreempted",
            "message": "Preempted to accommodate a higher priority Workload",
        }
    )
    api.set_status(NAME_A, status, node="node-1")
    api.pods[NAME_A]["metadata"]["deletionTimestamp"] = utc_timestamp()
    [obs] = backend.reconcile([run(UID_A)])
    assert obs.state is TaskState.PREEMPTED
    assert obs.error and obs.error.startswith("pod disrupted: WorkloadEvictedDueToPreempted: ")
    assert not obs.runtime_released


def test_create_refused_by_admission_is_retried(api: FakeKubeApi) -> None:
    """A PriorityClass not installed (yet): 403 without a webhook, the create is retried."""
    backend = make_backend(api, priority_classes={PriorityBand.INTERACTIVE: "no-such-class"})
    try:
        [obs] = backend.reconcile([run(UID_A, run_spec(UID_A))])
        assert obs.state is TaskState.ASSIGNED
        assert "could not create pod" in (obs.message or "") and "no-such-class" in (obs.message or "")
        assert api.pods == {}
    finally:
        backend.close()


def test_a_pod_created_earlier_is_adopted_on_conflict(api: FakeKubeApi) -> None:
    """409 on create: the pod exists (here made by a backend with another id); it is observed, not re-made."""
    first, second = make_backend(api, backend_id="one"), make_backend(api, backend_id="two")
    try:
        first.reconcile([run(UID_A, run_spec(UID_A))])
        [obs] = second.reconcile([run(UID_A, run_spec(UID_A))])
        assert obs.state is TaskState.ASSIGNED and obs.message == "waiting to be scheduled"
        assert len(api.pods) == 1
    finally:
        first.close()
        second.close()


def test_logs_through_the_pods_log_api(api: FakeKubeApi, backend: KubernetesBackend) -> None:
    target = TaskTarget(attempt_uid=UID_A)
    backend.reconcile([run(UID_A, run_spec(UID_A))])
    early = backend.read_logs(target, "/alice/train/0")  # 400: the container has not started
    assert early.lines == [] and not early.complete
    api.set_status(NAME_A, running_status(), node="node-1")
    for i in range(5):
        api.write_log(NAME_A, f"line {i}")
    page = backend.read_logs(target, "/alice/train/0", offset=1, limit=3)
    assert [line.line for line in page.lines] == ["line 1", "line 2", "line 3"]
    assert page.next_offset == 4 and not page.complete
    assert all(line.ts > 1.7e9 for line in page.lines)

    followed: list[str] = []
    stream = backend.follow_logs(target, "/alice/train/0")
    followed += [next(stream).line for _ in range(5)]
    api.write_log(NAME_A, "late line")
    followed.append(next(stream).line)
    api.finish_log(NAME_A)
    api.set_status(NAME_A, {"phase": "Succeeded"})
    followed += [line.line for line in stream]
    assert followed == [f"line {i}" for i in range(5)] + ["late line"]
    rest = backend.read_logs(target, "/alice/train/0", offset=4)
    assert [line.line for line in rest.lines] == ["line 4", "late line"] and rest.complete


def test_logs_of_a_deleted_pod(backend: KubernetesBackend) -> None:
    logs = backend.read_logs(TaskTarget(attempt_uid=UID_A), "/alice/train/0")
    assert logs.complete and logs.lines[0].stream == "system" and "no longer exists" in logs.lines[0].line


def test_task_rpcs_need_an_attempt_uid(backend: KubernetesBackend) -> None:
    with pytest.raises(InvalidArgument):
        backend.read_logs(TaskTarget(address="10.0.0.1:1"), "/alice/train/0")


def test_process_status_and_cluster_overview(api: FakeKubeApi, backend: KubernetesBackend) -> None:
    backend.reconcile([run(UID_A, run_spec(UID_A))])
    api.set_status(NAME_A, running_status(), node="node-1")
    api.add_event(NAME_A, "Scheduled", "assigned to node-1")
    status = backend.process_status(TaskTarget(attempt_uid=UID_A), "/alice/train/0")
    assert status["pod"] == NAME_A and status["phase"] == "Running" and status["node"] == "node-1"
    assert status["state"] == "RUNNING" and status["container_statuses"][0]["name"] == "task"
    assert [e["reason"] for e in status["events"]] == ["Scheduled"]
    assert json.dumps(status)  # plain data, ready for JSON
    with pytest.raises(NotFound):
        backend.process_status(TaskTarget(attempt_uid=UID_B), "/alice/train/0")
    overview = backend.cluster_overview()
    assert overview["pods"]["by_phase"] == {"Running": 1}
    assert overview["namespace"] == "iris" and overview["workloads"] == []
    assert [n["name"] for n in overview["nodes"]] == ["node-1"]


def test_unreachable_api_server_raises_unavailable(api: FakeKubeApi, backend: KubernetesBackend) -> None:
    api.unreachable = True
    with pytest.raises(Unavailable, match="cannot list pods"):
        backend.reconcile([run(UID_A)])
    overview = backend.cluster_overview()  # the dashboard still gets an answer, with the errors
    assert "unreachable" in overview["pods_error"] and "unreachable" in overview["nodes_error"]


def test_follow_waits_for_a_pending_container(api: FakeKubeApi, backend: KubernetesBackend) -> None:
    backend.reconcile([run(UID_A, run_spec(UID_A))])
    stream = backend.follow_logs(TaskTarget(attempt_uid=UID_A), "/alice/train/0")
    got: list[str] = []
    reader = threading.Thread(target=lambda: got.extend(line.line for line in stream), daemon=True)
    reader.start()
    api.set_status(NAME_A, running_status(), node="node-1")
    api.write_log(NAME_A, "hello")
    wait_for(lambda: got == ["hello"], what="the followed line")
    api.finish_log(NAME_A)
    api.set_status(NAME_A, {"phase": "Succeeded"})
    reader.join(timeout=10)
    assert not reader.is_alive() and got == ["hello"]


def test_watch_wakes_the_controller_on_pod_changes(api: FakeKubeApi) -> None:
    backend = make_backend(api)
    other = make_backend(api, backend_id="someone-else")
    calls: list[float] = []
    try:
        backend.watch_changes(lambda: calls.append(1.0))
        other.reconcile([run(UID_B, run_spec(UID_B, task="/bob/x/0"))])  # not ours: no wake-up
        backend.reconcile([run(UID_A, run_spec(UID_A))])
        wait_for(lambda: len(calls) >= 1, what="a wake-up for the created pod")
        seen = len(calls)
        api.set_status(NAME_A, running_status(), node="node-1")
        wait_for(lambda: len(calls) > seen, what="a wake-up for the status change")
    finally:
        backend.close()
        other.close()
    watcher = backend._watcher
    assert watcher is not None
    wait_for(lambda: not watcher.is_alive(), timeout=15, what="the watcher to stop after close()")
    assert len(calls) == 2  # only our pod's events: ADDED, status MODIFIED


def test_create_denied_by_a_webhook_fails_for_good(api: FakeKubeApi, backend: KubernetesBackend) -> None:
    """Kueue's validating webhook answers 403 with its reason: retrying the same pod cannot help."""
    denial = (
        'admission webhook "vpod.kb.io" denied the request: metadata.labels[kueue.x-k8s.io/queue-name]:'
        ' Invalid value: "Team_Q": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters'
    )

    def deny(pod: dict) -> None:
        raise KubeApiError(403, "Forbidden", denial)

    api.admission.append(deny)
    spec = run_spec(UID_A, env={"IRIS_TOKEN": "iris-job.payload.signature"})
    [obs] = backend.reconcile([run(UID_A, spec)])
    assert obs.state is TaskState.FAILED and obs.runtime_released
    assert obs.error == f"Kubernetes refused pod {NAME_A}: {denial}"
    assert api.pods == {}
    assert api.secrets == {}  # the refused pod's Secret is not left behind


def test_an_invalid_pod_fails_for_good(api: FakeKubeApi, backend: KubernetesBackend) -> None:
    def invalid(pod: dict) -> None:
        raise KubeApiError(422, "Invalid", "spec.containers[0].image: Required value")

    api.admission.append(invalid)
    [obs] = backend.reconcile([run(UID_A, run_spec(UID_A))])
    assert obs.state is TaskState.FAILED and obs.runtime_released
    assert (
        obs.error == f"Kubernetes rejected pod {NAME_A} as invalid: spec.containers[0].image: Required value"
    )


def _gated(api: FakeKubeApi, name: str) -> None:
    """Kueue's pod webhook: a queued pod is created behind its admission gate."""
    api.pods[name]["spec"]["schedulingGates"] = [{"name": "kueue.x-k8s.io/admission"}]


def _workload(name: str, pod: dict, condition: dict) -> dict:
    return {
        "metadata": {
            "name": f"pod-{name}",
            "namespace": "iris",
            "ownerReferences": [
                {"apiVersion": "v1", "kind": "Pod", "name": name, "uid": pod["metadata"]["uid"]}
            ],
        },
        "spec": {"queueName": "iris", "podSets": []},
        "status": {"conditions": [{**condition, "lastTransitionTime": utc_timestamp()}]},
    }


def test_a_missing_local_queue_fails_the_attempt(api: FakeKubeApi, backend: KubernetesBackend) -> None:
    """Kueue marks a Workload whose LocalQueue does not exist Inadmissible and waits for ever."""
    backend.reconcile([run(UID_A, run_spec(UID_A))])
    _gated(api, NAME_A)
    reserved = {
        "type": "QuotaReserved",
        "status": "False",
        "reason": "Inadmissible",
        "message": "LocalQueue iris doesn't exist",
    }
    api.workloads.append(_workload(NAME_A, api.pods[NAME_A], reserved))
    [obs] = backend.reconcile([run(UID_A)])
    assert obs.state is TaskState.FAILED and obs.runtime_released
    assert obs.error == f"Kueue will never admit pod {NAME_A}: LocalQueue iris doesn't exist"


def test_kueue_holds_what_does_not_fit_and_says_why(api: FakeKubeApi, backend: KubernetesBackend) -> None:
    backend.reconcile([run(UID_A, run_spec(UID_A)), run(UID_B, run_spec(UID_B, task="/alice/train/1"))])
    held = pod_name("/alice/train/1", UID_B)
    api.set_status(NAME_A, running_status(), node="node-1")
    _gated(api, held)
    pending = {
        "type": "QuotaReserved",
        "status": "False",
        "reason": "Pending",
        "message": "couldn't assign flavors to pod set main: insufficient unused quota for cpu in flavor default-flavor",
    }
    admitted = {"type": "Admitted", "status": "True", "reason": "Admitted", "message": "admitted"}
    api.workloads += [_workload(held, api.pods[held], pending), _workload(NAME_A, api.pods[NAME_A], admitted)]
    [_, obs] = backend.reconcile([run(UID_A), run(UID_B)])
    assert obs.state is TaskState.ASSIGNED
    assert (obs.message or "").startswith("waiting for Kueue admission: couldn't assign flavors"), obs.message
    assert "insufficient unused quota" in (obs.message or "")
    overview = backend.cluster_overview()
    assert overview["pods"]["kueue_gated"] == 1
    assert overview["pods"]["by_phase"] == {"Pending": 1, "Running": 1}
    assert overview["workloads_pending"] == 1 and overview["workloads_admitted"] == 1


def test_a_gang_is_one_kueue_pod_group(api: FakeKubeApi, backend: KubernetesBackend) -> None:
    uids = [f"666666666666666{i}" for i in range(3)]
    gang = [
        run(
            u,
            run_spec(
                u, task=f"/alice/gang/{i}", replicas=3, coscheduling=CoschedulingConfig(group_by="pool")
            ),
        )
        for i, u in enumerate(uids)
    ]
    backend.reconcile(gang)
    groups = {p["metadata"]["labels"]["kueue.x-k8s.io/pod-group-name"] for p in api.pods.values()}
    counts = {p["metadata"]["annotations"]["kueue.x-k8s.io/pod-group-total-count"] for p in api.pods.values()}
    assert len(api.pods) == 3 and len(groups) == 1 and counts == {"3"}


def test_a_preempted_pod_already_gone_is_preempted(api: FakeKubeApi, backend: KubernetesBackend) -> None:
    """Kueue deletes a preempted plain pod and lets it go at once; its "Stopped" event remains."""
    backend.reconcile([run(UID_A, run_spec(UID_A))])
    message = (
        "Preempted to accommodate a workload (UID: 42, JobUID: 43) due to prioritization in the ClusterQueue"
    )
    api.add_event(NAME_A, "Stopped", message)
    api.add_event(NAME_A, "Scheduled", "assigned to node-1")
    api.remove_pod(NAME_A)
    [obs] = backend.reconcile([run(UID_A), run(UID_B)])[:1]
    assert obs.state is TaskState.PREEMPTED and obs.runtime_released
    assert obs.error == f"preempted by Kueue: {message}"
    [other] = backend.reconcile([run(UID_B)])  # a pod that vanished without such an event is lost
    assert other.state is TaskState.MISSING


def test_the_job_token_and_secrets_live_in_a_secret_owned_by_the_pod(
    api: FakeKubeApi, backend: KubernetesBackend
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
    pod = api.pods[NAME_A]
    assert token not in json.dumps(pod) and "hunter2" not in json.dumps(pod)
    secret_name = f"{NAME_A}-env"
    (task,), (init,) = pod["spec"]["containers"], pod["spec"]["initContainers"]
    env = {e["name"]: e for e in task["env"]}
    assert env["PLAIN"]["value"] == "v"
    for key in ("IRIS_TOKEN", "DB_PASSWORD"):
        assert env[key]["valueFrom"] == {"secretKeyRef": {"name": secret_name, "key": key}}
    init_env = {e["name"]: e for e in init["env"]}
    assert init_env["IRIS_BUNDLE_TOKEN"]["valueFrom"] == {
        "secretKeyRef": {"name": secret_name, "key": "IRIS_TOKEN"}
    }
    secret = api.secrets[secret_name]
    data = {k: base64.b64decode(v).decode() for k, v in secret["data"].items()}
    assert data == {"IRIS_TOKEN": token, "DB_PASSWORD": "hunter2"}
    (owner,) = secret["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["name"], owner["uid"]) == ("Pod", NAME_A, pod["metadata"]["uid"])
    # Without a credential, no Secret and no reference.
    backend.reconcile([run(UID_B, run_spec(UID_B, task="/alice/train/1"))])
    assert f"{pod_name('/alice/train/1', UID_B)}-env" not in api.secrets


def test_a_secret_left_by_a_lost_answer_gets_the_new_data(
    api: FakeKubeApi, backend: KubernetesBackend
) -> None:
    """The Secret exists (an earlier round's create whose pod create failed): its data is set again."""
    spec = run_spec(UID_A, env={"IRIS_TOKEN": "new-token"})
    api.secrets[f"{NAME_A}-env"] = {"metadata": {"name": f"{NAME_A}-env"}, "data": {"IRIS_TOKEN": "b2xk"}}
    backend.reconcile([run(UID_A, spec)])
    data = api.secrets[f"{NAME_A}-env"]["data"]
    assert base64.b64decode(data["IRIS_TOKEN"]).decode() == "new-token"


def test_exec_runs_in_the_task_container_or_fails_clearly(
    api: FakeKubeApi, backend: KubernetesBackend
) -> None:
    backend.reconcile([run(UID_A, run_spec(UID_A))])
    target = TaskTarget(attempt_uid=UID_A)
    with pytest.raises(Unavailable, match=f"exec in pod {NAME_A} failed"):  # no exec served
        backend.exec(target, "/alice/train/0", ["echo", "hi"], timeout_s=10)
    calls: list[tuple[str, str, list[str]]] = []

    def handler(name: str, container: str, argv: list[str], timeout_s: float) -> ExecResult:
        calls.append((name, container, argv))
        return ExecResult(exit_code=0, stdout="hi\n", stderr="")

    api.exec_handler = handler
    result = backend.exec(target, "/alice/train/0", ["echo", "hi"], timeout_s=10)
    assert (result.exit_code, result.stdout) == (0, "hi\n")
    assert calls == [(NAME_A, "task", ["echo", "hi"])]
    with pytest.raises(NotFound):
        backend.exec(TaskTarget(attempt_uid="dddddddddddddddd"), "/alice/train/0", ["true"])
    with pytest.raises(InvalidArgument):
        backend.exec(target, "/alice/train/0", [])


def test_a_profile_runs_the_images_profiler_against_the_containers_pid_1(
    api: FakeKubeApi, backend: KubernetesBackend
) -> None:
    """The caller's argv is not what runs: the backend builds the pod's profiler command itself."""
    backend.reconcile([run(UID_A, run_spec(UID_A))])
    calls: list[list[str]] = []

    def handler(name: str, container: str, argv: list[str], timeout_s: float) -> ExecResult:
        calls.append(argv)
        return ExecResult(exit_code=0, stdout="Thread 1 (idle)\n", stderr="")

    api.exec_handler = handler
    ref = AttemptRef(TaskTarget(attempt_uid=UID_A), UID_A, "/alice/train/0")
    request = ExecRequest(argv=["rm", "-rf", "/"], profile=ProfileRequest(kind="threads"))
    assert backend.attempt_exec(ref, request).stdout == "Thread 1 (idle)\n"
    assert calls == [pod_profile_argv("threads", 10.0, "text")]
    script = calls[0][2]
    assert "command -v py-spy" in script and "IRIS_TASK_PID=1" in script and "dump --pid" in script
    # Where the image has no py-spy, one sentence says so (the script run here with a bare PATH).
    done = subprocess.run(
        ["/bin/sh", *calls[0][1:]], capture_output=True, text=True, env={"PATH": "/nonexistent"}, timeout=30
    )
    assert (done.returncode, done.stderr.strip()) == (
        3,
        "py-spy is not installed in the task's image (pip install py-spy there to profile its pods)",
    )


def test_job_image_is_the_pod_image_and_a_pull_failure_ends_with_kind_image(api: FakeKubeApi) -> None:
    image = "registry.example/does-not-exist:1"
    backend = make_backend(api, image_pull_grace_s=0.0)
    try:
        spec = run_spec(UID_A, image=image, image_pull_policy="always")
        backend.reconcile([run(UID_A, spec)])
        container = api.pods[NAME_A]["spec"]["containers"][0]
        assert (container["image"], container["imagePullPolicy"]) == (image, "Always")
        api.set_status(
            NAME_A,
            {
                "phase": "Pending",
                "conditions": [
                    {"type": "PodScheduled", "status": "True", "lastTransitionTime": utc_timestamp(0)}
                ],
                "containerStatuses": [
                    {
                        "name": "task",
                        "image": image,
                        "state": {"waiting": {"reason": "ErrImagePull", "message": "not found"}},
                    }
                ],
            },
            node="node-1",
        )
        [failed] = backend.reconcile([run(UID_A)])
        assert failed.state is TaskState.FAILED
        assert failed.error is not None and failed.error.startswith(
            f"{IMAGE_ERROR_PREFIX}{image} could not be pulled"
        )
        backend.reconcile([])  # the controller stops wanting it: the pod (still pulling) is deleted
        assert ("delete pod", NAME_A) in api.writes
    finally:
        backend.close()
