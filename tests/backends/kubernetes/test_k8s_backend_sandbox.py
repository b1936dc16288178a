"""KubernetesBackend end to end in the sandbox: HTTPS + token API server, Kueue admitting and
evicting, a kubelet running each pod's command as a real local process.

The test plays the controller: it calls ``reconcile`` with the desired set, the way the
control loop does every round, until the observations say what it waits for.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
import yaml
from k8s_sandbox_helpers import kubectl, run, run_spec, stop, wait_for

from iris.cluster.backends.kubernetes import KubernetesBackend, KubernetesBackendConfig
from iris.cluster.backends.kubernetes.manifests import manifests_yaml, render_manifests
from iris.cluster.backends.kubernetes.naming import pod_name
from iris.cluster.controller.backend import TaskTarget
from iris.rpc.enums import TaskState
from iris.rpc.errors import NotFound, Unavailable
from iris.rpc.models import AttemptObservation, CoschedulingConfig, DesiredAttempt, Entrypoint, ResourceSpec
from iris.testing.fake_apiserver import PODS
from iris.testing.k8s_sandbox import Sandbox, start_sandbox

PY = sys.executable


def _double_it(x: int) -> None:
    print(f"callable says {x * 2}")


def install_priority_classes(sandbox: Sandbox) -> None:
    """The sandbox brings namespace and queues; the operator's manifests bring the bands' classes."""
    objects = [
        o
        for o in render_manifests(kueue_api_version="v1beta1")
        if o["kind"] in ("PriorityClass", "WorkloadPriorityClass")
    ]
    kubectl(sandbox.kubeconfig_path, "apply", "-f", "-", stdin=manifests_yaml(objects))


@pytest.fixture
def sandbox(tmp_path: Path) -> Iterator[Sandbox]:
    with start_sandbox(tmp_path / "sandbox", nodes=2, cpu_per_node="2", memory_per_node="4Gi") as box:
        install_priority_classes(box)
        yield box


@pytest.fixture
def backend(sandbox: Sandbox) -> Iterator[KubernetesBackend]:
    b = KubernetesBackend(
        KubernetesBackendConfig(kubeconfig=str(sandbox.kubeconfig_path), namespace=sandbox.namespace),
        controller_url="http://controller.test:10000",
        backend_id="sandbox",
    )
    yield b
    b.close()


def until(
    backend: KubernetesBackend,
    desired: list[DesiredAttempt],
    uid: str,
    *states: TaskState,
    timeout: float = 30,
) -> AttemptObservation:
    """Reconcile like the control loop until attempt ``uid`` is observed in one of ``states``.

    After the first round the spec is dropped (the controller stops sending it once it has seen
    the attempt past ASSIGNED)."""
    current = list(desired)

    def step() -> AttemptObservation | None:
        nonlocal current
        observations = {o.attempt_uid: o for o in backend.reconcile(current)}
        current = [
            DesiredAttempt(attempt_uid=d.attempt_uid, intent=d.intent, stop_reason=d.stop_reason)
            if d.intent == "run" and observations[d.attempt_uid].state is not TaskState.ASSIGNED
            else d
            for d in current
        ]
        obs = observations[uid]
        return obs if obs.state in states else None

    return wait_for(step, timeout=timeout, what=f"attempt {uid} to reach {[s.value for s in states]}")


def pods(sandbox: Sandbox) -> list[dict[str, Any]]:
    return sandbox.server.store.list(PODS, sandbox.namespace).items


def test_command_runs_to_success_with_its_logs_and_env(sandbox: Sandbox, backend: KubernetesBackend) -> None:
    uid, task = "1111111111111111", "/alice/hello/0"
    script = "import os; print('hello'); print(os.environ['IRIS_TASK_ID'], os.environ['IRIS_CONTROLLER_URL']); print('$$ $(IRIS_JOB_ID)')"
    desired = [run(uid, run_spec(uid, task=task, argv=(PY, "-c", script)))]
    first = backend.reconcile(desired)
    assert first[0].state is TaskState.ASSIGNED  # Kueue gates every new pod
    done = until(backend, desired, uid, TaskState.SUCCEEDED)
    assert done.exit_code == 0 and done.runtime_released and done.finished_at
    logs = backend.read_logs(TaskTarget(attempt_uid=uid), task)
    assert [line.line for line in logs.lines] == [
        "hello",
        "/alice/hello/0 http://controller.test:10000",
        "$$ $(IRIS_JOB_ID)",
    ]
    assert logs.complete


def test_the_task_reads_its_job_token_from_its_secret(sandbox: Sandbox, backend: KubernetesBackend) -> None:
    """The token is a secretKeyRef in the pod spec; the kubelet resolves it from the API server."""
    uid, task = "5151515151515151", "/alice/token/0"
    script = "import os; print(os.environ['IRIS_TOKEN'], os.environ['DB_PASSWORD'])"
    spec = run_spec(
        uid,
        task=task,
        argv=(PY, "-c", script),
        env={"IRIS_TOKEN": "iris-job.t0k$n"},
        secret_env={"DB_PASSWORD": "pw"},
    )
    done = until(backend, [run(uid, spec)], uid, TaskState.SUCCEEDED)
    assert done.exit_code == 0
    logs = backend.read_logs(TaskTarget(attempt_uid=uid), task)
    assert [line.line for line in logs.lines] == ["iris-job.t0k$n pw"]
    (pod,) = [p for p in pods(sandbox) if p["metadata"]["annotations"]["iris.task_id"] == task]
    assert "iris-job.t0k$n" not in json.dumps(pod["spec"])


def test_failure_exit_code(sandbox: Sandbox, backend: KubernetesBackend) -> None:
    uid = "2222222222222222"
    desired = [
        run(uid, run_spec(uid, argv=(PY, "-c", "import sys; print('boom', file=sys.stderr); sys.exit(3)")))
    ]
    failed = until(backend, desired, uid, TaskState.FAILED)
    assert failed.exit_code == 3 and failed.error == "exited with code 3"


def test_callable_entrypoint_runs_in_a_pod(sandbox: Sandbox, backend: KubernetesBackend) -> None:
    uid, task = "3333333333333333", "/alice/fn/0"
    spec = run_spec(uid, task=task).model_copy(
        update={"entrypoint": Entrypoint.from_callable(_double_it, 21)}
    )
    until(backend, [run(uid, spec)], uid, TaskState.SUCCEEDED)
    lines = [line.line for line in backend.read_logs(TaskTarget(attempt_uid=uid), task).lines]
    # The sandbox has no controller to take the callable's result: the runner says so in one line.
    assert "callable says 42" in lines
    (other,) = [line for line in lines if line != "callable says 42"]
    assert other.startswith(
        f"iris: could not send the task's result to http://controller.test:10000/api/v1/tasks{task}:result: "
    ) and other.endswith("; Job.result() cannot return this task's value"), other


def test_second_reconcile_creates_nothing(sandbox: Sandbox, backend: KubernetesBackend) -> None:
    uids = ["4444444444444440", "4444444444444441"]
    desired = [
        run(u, run_spec(u, task=f"/alice/idem/{i}", argv=(PY, "-c", "import time; time.sleep(30)")))
        for i, u in enumerate(uids)
    ]
    backend.reconcile(desired)
    before = {p["metadata"]["name"]: p["metadata"]["uid"] for p in pods(sandbox)}
    for _ in range(3):
        backend.reconcile(desired)  # spec still sent, as for attempts never seen past ASSIGNED
    after = {p["metadata"]["name"]: p["metadata"]["uid"] for p in pods(sandbox)}
    assert after == before and len(after) == 2


def test_kueue_holds_what_does_not_fit_and_says_why(tmp_path: Path) -> None:
    quota = {"cpu": "2", "memory": "8Gi"}  # less than the nodes could run
    with start_sandbox(
        tmp_path / "small", nodes=2, cpu_per_node="2", memory_per_node="4Gi", quota=quota
    ) as box:
        install_priority_classes(box)
        backend = KubernetesBackend(
            KubernetesBackendConfig(kubeconfig=str(box.kubeconfig_path), namespace=box.namespace),
            controller_url="http://controller.test:10000",
            backend_id="sandbox",
        )
        try:
            sleeper = (PY, "-c", "import time; time.sleep(30)")
            big = ResourceSpec(cpu=1.5, memory="1GB")
            a, b = "5555555555555550", "5555555555555551"
            desired = [
                run(a, run_spec(a, task="/alice/big/0", argv=sleeper).model_copy(update={"resources": big})),
                run(b, run_spec(b, task="/alice/big/1", argv=sleeper).model_copy(update={"resources": big})),
            ]
            until(backend, desired, a, TaskState.RUNNING)

            def held_with_reason() -> AttemptObservation | None:
                obs = backend.reconcile([run(a), desired[1]])[1]  # always the complete desired set
                return (
                    obs
                    if obs.state is TaskState.ASSIGNED and "quota" in (obs.message or "").lower()
                    else None
                )

            held = wait_for(held_with_reason, what="Kueue's reason on the held attempt")
            assert (held.message or "").startswith("waiting for Kueue admission: "), held.message
            overview = backend.cluster_overview()
            assert overview["pods"]["kueue_gated"] == 1 and overview["pods"]["by_phase"] == {
                "Pending": 1,
                "Running": 1,
            }
            assert overview["workloads_pending"] == 1 and overview["workloads_admitted"] == 1
            assert [n["name"] for n in overview["nodes"]] == ["node-0", "node-1"]
        finally:
            backend.close()


def test_gang_is_admitted_whole(sandbox: Sandbox, backend: KubernetesBackend) -> None:
    sleeper = (PY, "-c", "import time; time.sleep(30)")
    uids = [f"666666666666666{i}" for i in range(3)]
    gang = [
        run(
            u,
            run_spec(
                u,
                task=f"/alice/gang/{i}",
                argv=sleeper,
                replicas=3,
                coscheduling=CoschedulingConfig(group_by="pool"),
            ),
        )
        for i, u in enumerate(uids)
    ]
    backend.reconcile(gang)

    def bound() -> list[str]:
        # Admitted whole: every member is ungated and bound to a node. (Their rendezvous init
        # containers then wait for a controller this test does not run; see gang.py.)
        found = pods(sandbox)
        nodes = [p["spec"].get("nodeName") for p in found if not p["spec"].get("schedulingGates")]
        return nodes if len(found) == 3 and all(nodes) and len(nodes) == 3 else []

    wait_for(bound, timeout=30, what="every gang member bound")
    groups = {p["metadata"]["labels"]["kueue.x-k8s.io/pod-group-name"] for p in pods(sandbox)}
    assert len(groups) == 1


def test_preempted_pod_is_preempted(sandbox: Sandbox, backend: KubernetesBackend) -> None:
    uid, task = "7777777777777777", "/alice/evict/0"
    # The task ignores SIGTERM, so its pod lingers (being deleted) through the grace period.
    script = "import signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\nprint('up', flush=True)\ntime.sleep(120)"
    desired = [run(uid, run_spec(uid, task=task, argv=(PY, "-u", "-c", script)))]
    until(backend, desired, uid, TaskState.RUNNING)
    wait_for(lambda: backend.read_logs(TaskTarget(attempt_uid=uid), task).lines, what="the SIGTERM handler")
    assert sandbox.kueue.evict(pod_name(task, uid), namespace=sandbox.namespace) == [pod_name(task, uid)]
    [lost] = backend.reconcile([run(uid)])
    assert lost.state is TaskState.PREEMPTED
    assert lost.error and lost.error.startswith("pod disrupted: WorkloadEvictedDueToPreempted: ")
    assert not lost.runtime_released  # the process is still in its grace period


def test_stop_kills_the_process_and_releases(
    sandbox: Sandbox, backend: KubernetesBackend, tmp_path: Path
) -> None:
    uid, task = "8888888888888888", "/alice/stop/0"
    marker = str(tmp_path / "stop-marker")
    script = f"import time  # {marker}\ntime.sleep(120)"
    until(backend, [run(uid, run_spec(uid, task=task, argv=(PY, "-c", script)))], uid, TaskState.RUNNING)
    wait_for(lambda: task_processes(marker), what="the task process to start")

    def released() -> bool:
        [obs] = backend.reconcile([stop(uid)])
        assert obs.state is TaskState.KILLED
        return obs.runtime_released

    wait_for(released, what="the stopped pod to be gone")
    assert sandbox.server.store.try_get(PODS, sandbox.namespace, pod_name(task, uid)) is None
    assert task_processes(marker) == []


def task_processes(marker: str) -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        if any(marker in part for part in proc.info["cmdline"] or []):
            found.append(proc)
    return found


def test_stray_after_controller_restart_is_killed(sandbox: Sandbox, backend: KubernetesBackend) -> None:
    uid, task = "9999999999999999", "/alice/stray/0"
    until(
        backend,
        [run(uid, run_spec(uid, task=task, argv=(PY, "-c", "import time; time.sleep(60)")))],
        uid,
        TaskState.RUNNING,
    )
    name = pod_name(task, uid)
    backend.reconcile([])  # the task was killed while the controller was down: nobody wants it
    wait_for(
        lambda: sandbox.server.store.try_get(PODS, sandbox.namespace, name) is None,
        what="the stray pod to be deleted",
    )


def test_keep_for_a_deleted_pod_is_missing(sandbox: Sandbox, backend: KubernetesBackend) -> None:
    uid, task = "aaaaaaaaaaaaaaaa", "/alice/gone/0"
    until(
        backend,
        [run(uid, run_spec(uid, task=task, argv=(PY, "-c", "import time; time.sleep(60)")))],
        uid,
        TaskState.RUNNING,
    )
    kubectl(sandbox.kubeconfig_path, "delete", "pod", pod_name(task, uid), "--wait=true")
    [missing] = backend.reconcile([run(uid)])
    assert missing.state is TaskState.MISSING


def test_process_status_shows_the_pod(sandbox: Sandbox, backend: KubernetesBackend) -> None:
    uid, task = "bbbbbbbbbbbbbbbb", "/alice/status/0"
    until(
        backend,
        [run(uid, run_spec(uid, task=task, argv=(PY, "-c", "import time; time.sleep(60)")))],
        uid,
        TaskState.RUNNING,
    )
    status = backend.process_status(TaskTarget(attempt_uid=uid), task)
    assert status["phase"] == "Running" and status["state"] == "RUNNING"
    assert status["node"] in ("node-0", "node-1")
    assert yaml.safe_dump(status)  # plain data, ready for JSON/YAML


def test_exec_runs_in_the_task_container_or_fails_clearly(
    sandbox: Sandbox, backend: KubernetesBackend
) -> None:
    """pods/exec is a websocket upgrade; where the API server does not serve it, the error says so."""
    uid, task = "cccccccccccccccc", "/alice/exec/0"
    until(
        backend,
        [run(uid, run_spec(uid, task=task, argv=(PY, "-c", "import time; time.sleep(60)")))],
        uid,
        TaskState.RUNNING,
    )
    try:
        result = backend.exec(TaskTarget(attempt_uid=uid), task, ["echo", "hi"], timeout_s=10)
    except Unavailable as err:
        assert f"exec in pod {pod_name(task, uid)} failed" in err.message
    else:
        assert (result.exit_code, result.stdout) == (0, "hi\n")
    with pytest.raises(NotFound):
        backend.exec(TaskTarget(attempt_uid="dddddddddddddddd"), task, ["true"])


def test_job_image_is_the_pod_image_and_a_pull_failure_ends_with_kind_image(sandbox: Sandbox) -> None:
    from iris.cluster.controller.failure import IMAGE_ERROR_PREFIX

    image = "registry.example/does-not-exist:1"
    backend = KubernetesBackend(
        KubernetesBackendConfig(
            kubeconfig=str(sandbox.kubeconfig_path), namespace=sandbox.namespace, image_pull_grace_s=1.0
        ),
        controller_url="http://controller.test:10000",
        backend_id="sandbox",
    )
    try:
        uid = "6666666666666666"
        desired = [run(uid, run_spec(uid, task="/alice/img/0", image=image, image_pull_policy="always"))]
        failed = until(backend, desired, uid, TaskState.FAILED)
        assert failed.error is not None and failed.error.startswith(
            f"{IMAGE_ERROR_PREFIX}{image} could not be pulled"
        )
        [pod] = [p for p in pods(sandbox) if p["metadata"]["name"] == pod_name("/alice/img/0", uid)]
        container = pod["spec"]["containers"][0]
        assert (container["image"], container["imagePullPolicy"]) == (image, "Always")
        # The controller stops wanting the attempt: its pod (still pulling) is deleted.
        wait_for(lambda: backend.reconcile([]) is not None and not pods(sandbox), what="the pod deleted")
    finally:
        backend.close()
