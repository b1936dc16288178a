"""The backend's seam (``KubeApi``) against the real API server: what the in-memory fake of the
unit tests (tests/backends/kubernetes/fake_kube_api.py) takes for granted."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest

from iris.cluster.backends.kubernetes.api import KubeApi, KubeApiError
from iris.cluster.backends.kubernetes.config import KubernetesBackendConfig
from iris.testing.control_plane import ControlPlane

pytestmark = pytest.mark.real_k8s


def _unschedulable_pod(name: str, label: str) -> dict:
    """Bound to a node that does not exist: it stays Pending, nothing runs it."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"seam-test": label}},
        "spec": {
            "nodeName": "no-such-node",
            "restartPolicy": "Never",
            "containers": [{"name": "task", "image": "busybox", "command": ["true"]}],
        },
    }


def test_listing_pages_through_every_pod_and_absent_objects_are_none(
    real_control_plane: ControlPlane,
) -> None:
    namespace = f"seam-{uuid.uuid4().hex[:8]}"
    real_control_plane.kubectl("create", "namespace", namespace)
    api = KubeApi(
        KubernetesBackendConfig(
            kubeconfig=str(real_control_plane.admin_kubeconfig), namespace=namespace, list_page_size=2
        )
    )
    try:
        label = uuid.uuid4().hex[:8]
        for i in range(5):
            api.create_pod(_unschedulable_pod(f"p{i}", label))
        with pytest.raises(KubeApiError) as conflict:
            api.create_pod(_unschedulable_pod("p0", label))
        assert conflict.value.status == 409
        names = sorted(p["metadata"]["name"] for p in api.list_pods({"seam-test": label}))
        assert names == [f"p{i}" for i in range(5)]  # three pages of two
        assert api.get_pod("absent") is None and api.get_secret("absent") is None
        assert api.delete_pod("absent") is False and api.delete_secret("absent") is False
        pod = api.get_pod("p0")
        assert pod is not None and json.dumps(pod)
    finally:
        api.close()
        real_control_plane.kubectl("delete", "namespace", namespace, "--wait=false", check=False)


def test_an_unreachable_server_is_status_zero(real_control_plane: ControlPlane, tmp_path: Path) -> None:
    config = json.loads(real_control_plane.kubectl("config", "view", "--raw", "-o", "json").stdout)
    config["clusters"][0]["cluster"]["server"] = "https://127.0.0.1:1"
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(json.dumps(config))
    api = KubeApi(
        KubernetesBackendConfig(kubeconfig=str(kubeconfig), namespace="default", request_timeout_s=2)
    )
    try:
        with pytest.raises(KubeApiError) as err:
            api.list_pods({})
        assert err.value.status == 0 and "unreachable" in err.value.message
    finally:
        api.close()
