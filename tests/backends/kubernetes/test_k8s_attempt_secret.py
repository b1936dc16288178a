"""A task's job token reaches its container through a per-attempt Secret the pod owns (resolved by
the kubelet from the API server, deleted with the pod), in the sandbox and on the real control plane."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from k8s_sandbox_helpers import run, run_spec, wait_for
from tests.journeys.harness import REAL_K8S

from iris.cluster.backends.kubernetes import KubernetesBackend, KubernetesBackendConfig
from iris.cluster.backends.kubernetes.api import KubeApi
from iris.cluster.backends.kubernetes.naming import pod_name
from iris.cluster.controller.backend import TaskTarget
from iris.rpc.enums import TaskState
from iris.testing.k8s_sandbox import start_sandbox

TOKEN = "iris-job.eyJqb2IiOiAiL2FsaWNlL3NlY3JldCJ9.c1gn4ture"


@pytest.fixture(params=["kubernetes", *REAL_K8S])
def where(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[dict[str, Any]]:
    if request.param == "real_k8s":
        cp = request.getfixturevalue("real_control_plane")
        yield {"kubeconfig": str(cp.controller_kubeconfig), "namespace": cp.namespace, "real": True}
        return
    with start_sandbox(tmp_path / "sandbox", nodes=1) as box:
        yield {"kubeconfig": str(box.kubeconfig_path), "namespace": box.namespace, "real": False}


def test_the_job_token_comes_from_a_secret_owned_by_the_pod(where: dict[str, Any]) -> None:
    real = where.pop("real")
    config = KubernetesBackendConfig(**where)
    backend = KubernetesBackend(
        config, controller_url="http://controller.test:10000", backend_id="secret-test"
    )
    api = KubeApi(config)
    uid, task = "5ec7e75ec7e75ec7", "/alice/secret/0"
    spec = run_spec(uid, task=task, argv=("sh", "-c", 'echo "token=$IRIS_TOKEN"'), env={"IRIS_TOKEN": TOKEN})
    name = pod_name(task, uid)
    try:

        def finished() -> bool:
            [obs] = backend.reconcile([run(uid, spec)])
            return obs.state is TaskState.SUCCEEDED

        wait_for(finished, timeout=90, what="the task to succeed")
        logs = backend.read_logs(TaskTarget(attempt_uid=uid), task)
        assert [line.line for line in logs.lines] == [f"token={TOKEN}"]
        pod = api.get_pod(name)
        assert pod is not None and TOKEN not in json.dumps(pod["spec"])
        secret = api.get_secret(f"{name}-env")
        assert secret is not None
        (owner,) = secret["metadata"]["ownerReferences"]
        assert (owner["kind"], owner["name"], owner["uid"]) == ("Pod", name, pod["metadata"]["uid"])
        if real:  # the garbage collector deletes the Secret with its pod
            api.delete_pod(name)
            wait_for(lambda: api.get_secret(f"{name}-env") is None, timeout=60, what="the secret collected")
    finally:
        backend.close()
        api.close()
