"""A task's job token reaches its container through a per-attempt Secret the pod owns (resolved by
the kubelet from the API server, deleted with the pod by the garbage collector), on the real
control plane; its environment and literal ``$(...)`` arguments arrive as written."""

from __future__ import annotations

import json
from typing import Any

import pytest
from k8s_backend_helpers import run, run_spec, wait_for

from iris.cluster.backends.kubernetes import KubernetesBackend, KubernetesBackendConfig
from iris.cluster.backends.kubernetes.api import KubeApi
from iris.cluster.backends.kubernetes.naming import pod_name
from iris.cluster.controller.backend import TaskTarget
from iris.rpc.enums import TaskState
from iris.testing.control_plane import ControlPlane

TOKEN = "iris-job.eyJqb2IiOiAiL2FsaWNlL3NlY3JldCJ9.c1gn4ture"


@pytest.fixture
def where(real_control_plane: ControlPlane) -> dict[str, Any]:
    """The controller's ServiceAccount kubeconfig: the real authorizer checks our RBAC."""
    return {
        "kubeconfig": str(real_control_plane.controller_kubeconfig),
        "namespace": real_control_plane.namespace,
    }


@pytest.mark.real_k8s
def test_the_job_token_comes_from_a_secret_owned_by_the_pod(where: dict[str, Any]) -> None:
    config = KubernetesBackendConfig(**where)
    backend = KubernetesBackend(
        config, controller_url="http://controller.test:10000", backend_id="secret-test"
    )
    api = KubeApi(config)
    uid, task = "5ec7e75ec7e75ec7", "/alice/secret/0"
    script = (
        """echo "token=$IRIS_TOKEN"; echo "$IRIS_TASK_ID $IRIS_CONTROLLER_URL"; echo '$$ $(IRIS_JOB_ID)'"""
    )
    spec = run_spec(uid, task=task, argv=("sh", "-c", script), env={"IRIS_TOKEN": TOKEN})
    name = pod_name(task, uid)
    try:

        def finished() -> bool:
            [obs] = backend.reconcile([run(uid, spec)])
            return obs.state is TaskState.SUCCEEDED

        wait_for(finished, timeout=90, what="the task to succeed")
        logs = backend.read_logs(TaskTarget(attempt_uid=uid), task)
        # Kubernetes expands $(VAR) in a container's command: the backend escapes the argv, so the
        # shell receives the script as written.
        assert [line.line for line in logs.lines] == [
            f"token={TOKEN}",
            f"{task} http://controller.test:10000",
            "$$ $(IRIS_JOB_ID)",
        ]
        assert logs.complete
        pod = api.get_pod(name)
        assert pod is not None and TOKEN not in json.dumps(pod["spec"])
        secret = api.get_secret(f"{name}-env")
        assert secret is not None
        (owner,) = secret["metadata"]["ownerReferences"]
        assert (owner["kind"], owner["name"], owner["uid"]) == ("Pod", name, pod["metadata"]["uid"])
        api.delete_pod(name)  # the garbage collector deletes the Secret with its pod
        wait_for(lambda: api.get_secret(f"{name}-env") is None, timeout=60, what="the secret collected")
    finally:
        backend.close()
        api.close()
