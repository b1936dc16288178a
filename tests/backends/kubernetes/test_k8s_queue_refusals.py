"""A queue Kueue will never serve fails the attempt, against the real Kueue (its webhook and its
Inadmissible Workload); the seam-level cases are in test_k8s_backend_api.py."""

from __future__ import annotations

from typing import Any

import pytest
from k8s_backend_helpers import run, run_spec, wait_for

from iris.cluster.backends.kubernetes import KubernetesBackend, KubernetesBackendConfig
from iris.cluster.backends.kubernetes.api import KubeApi
from iris.cluster.backends.kubernetes.naming import LABEL_BACKEND_ID, LABEL_MANAGED
from iris.rpc.enums import TaskState
from iris.rpc.models import AttemptObservation
from iris.testing.control_plane import ControlPlane


@pytest.fixture
def where(real_control_plane: ControlPlane) -> dict[str, Any]:
    """The controller's ServiceAccount kubeconfig: the real authorizer checks our RBAC."""
    return {
        "kubeconfig": str(real_control_plane.controller_kubeconfig),
        "namespace": real_control_plane.namespace,
    }


@pytest.mark.real_k8s
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
