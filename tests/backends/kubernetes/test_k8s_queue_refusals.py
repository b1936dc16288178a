"""A queue Kueue will never serve fails the attempt, in the sandbox and against the real Kueue."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from k8s_sandbox_helpers import run, run_spec, wait_for
from tests.journeys.harness import REAL_K8S

from iris.cluster.backends.kubernetes import KubernetesBackend, KubernetesBackendConfig
from iris.cluster.backends.kubernetes.api import KubeApi
from iris.cluster.backends.kubernetes.naming import LABEL_BACKEND_ID, LABEL_MANAGED
from iris.rpc.enums import TaskState
from iris.rpc.models import AttemptObservation
from iris.testing.k8s_sandbox import start_sandbox


@pytest.fixture(params=["kubernetes", *REAL_K8S])
def where(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[dict[str, Any]]:
    """Kubeconfig and namespace of the sandbox, or of the real control plane (its controller's
    ServiceAccount token, so the real authorizer checks our RBAC)."""
    if request.param == "real_k8s":
        cp = request.getfixturevalue("real_control_plane")
        yield {"kubeconfig": str(cp.controller_kubeconfig), "namespace": cp.namespace}
        return
    with start_sandbox(tmp_path / "sandbox", nodes=1) as box:
        yield {"kubeconfig": str(box.kubeconfig_path), "namespace": box.namespace}


@pytest.mark.parametrize(
    ("queue", "error"),
    [
        # Kueue's pod webhook refuses a queue name that is no DNS-1123 subdomain: 403 on create.
        (
            "Team_Q",
            'admission webhook "vpod.kb.io" denied the request: metadata.labels[kueue.x-k8s.io/queue-name]',
        ),
        # A well-formed name with no LocalQueue behind it: Kueue's Workload is Inadmissible for ever.
        ("no-such-queue", "LocalQueue no-such-queue doesn't exist"),
    ],
    ids=["invalid-queue-name", "missing-local-queue"],
)
def test_a_queue_kueue_will_never_serve_fails_the_attempt(
    where: dict[str, Any], queue: str, error: str
) -> None:
    config = KubernetesBackendConfig(local_queue=queue, **where)
    backend_id = f"refusals-{queue.lower().replace('_', '-')}"
    backend = KubernetesBackend(config, controller_url="http://controller.test:10000", backend_id=backend_id)
    api = KubeApi(config)
    uid = "9999999999999999"
    desired = [run(uid, run_spec(uid, task="/alice/q/0"))]
    try:

        def failed() -> AttemptObservation | None:
            [obs] = backend.reconcile(desired)
            return obs if obs.state is TaskState.FAILED else None

        obs = wait_for(failed, timeout=60, what="the attempt to fail")
        assert error in (obs.error or ""), obs.error
        assert obs.runtime_released

        def gone() -> bool:  # the controller no longer asks for it: the pod (if any) is a stray
            backend.reconcile([])
            return not api.list_pods({LABEL_MANAGED: "true", LABEL_BACKEND_ID: backend_id})

        wait_for(gone, timeout=60, what="the refused attempt's pod gone")
    finally:
        backend.close()
        api.close()
