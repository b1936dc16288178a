"""Smoke test of the real control plane: versions, nodes, the node agent, logs, Kueue, RBAC."""

from __future__ import annotations

import uuid
from typing import Any

import httpx
import psutil
import pytest
from tests.conftest import wait_until

from iris.testing.control_plane import ControlPlane
from iris.testing.control_plane.cluster import tls_context

pytestmark = pytest.mark.real_k8s

QUEUE_LABEL = "kueue.x-k8s.io/queue-name"


def _pod(name: str, script: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": labels or {}},
        "spec": {
            "restartPolicy": "Never",
            "containers": [
                {
                    "name": "main",
                    "image": "busybox",
                    "command": ["sh", "-c", script],
                    "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}},
                }
            ],
        },
    }


def _phase(client: httpx.Client, namespace: str, name: str) -> str:
    return client.get(f"/api/v1/namespaces/{namespace}/pods/{name}").json().get("status", {}).get("phase", "")


def test_version_is_stamped(real_control_plane: ControlPlane) -> None:
    with real_control_plane.admin_client() as client:
        version = client.get("/version").json()
    assert version["gitVersion"] == real_control_plane.versions["kubernetes"]
    assert "master" not in version["gitVersion"]


def test_nodes_are_ready(real_control_plane: ControlPlane) -> None:
    with real_control_plane.admin_client() as client:
        nodes = client.get("/api/v1/nodes").json()["items"]
    ready = {
        n["metadata"]["name"]
        for n in nodes
        if any(c["type"] == "Ready" and c["status"] == "True" for c in n["status"]["conditions"])
    }
    assert set(real_control_plane.node_names) <= ready


def test_plain_pod_runs_and_kubectl_logs_reads_it(real_control_plane: ControlPlane) -> None:
    cp = real_control_plane
    namespace = f"smoke-{uuid.uuid4().hex[:6]}"
    cp.kubectl("create", "namespace", namespace)
    # The namespace's default ServiceAccount comes from kube-controller-manager.
    with cp.admin_client() as client:
        wait_until(
            lambda: client.get(f"/api/v1/namespaces/{namespace}/serviceaccounts/default").status_code == 200,
            timeout=60,
            what="the default ServiceAccount",
        )
        response = client.post(
            f"/api/v1/namespaces/{namespace}/pods",
            json=_pod("hello", "echo hello-from-the-node-agent; exit 0"),
        )
        assert response.status_code == 201, response.text
        wait_until(
            lambda: _phase(client, namespace, "hello") == "Succeeded", timeout=90, what="pod Succeeded"
        )
        pod = client.get(f"/api/v1/namespaces/{namespace}/pods/hello").json()
    assert pod["spec"]["nodeName"] in cp.node_names  # bound by the real kube-scheduler
    terminated = pod["status"]["containerStatuses"][0]["state"]["terminated"]
    assert terminated["exitCode"] == 0
    logs = cp.kubectl("logs", "-n", namespace, "hello")
    assert logs.stdout.strip() == "hello-from-the-node-agent"


def test_failed_pod_reports_its_exit_code(real_control_plane: ControlPlane) -> None:
    cp = real_control_plane
    namespace = cp.namespace
    name = f"fails-{uuid.uuid4().hex[:6]}"
    with cp.admin_client() as client:
        pod = _pod(name, "exit 3")
        pod["spec"]["priorityClassName"] = "iris-batch"  # admitted by the Priority plugin
        response = client.post(f"/api/v1/namespaces/{namespace}/pods", json=pod)
        assert response.status_code == 201, response.text
        assert response.json()["spec"]["priority"] == 10
        wait_until(lambda: _phase(client, namespace, name) == "Failed", timeout=90, what="pod Failed")
        status = client.get(f"/api/v1/namespaces/{namespace}/pods/{name}").json()["status"]
    assert status["containerStatuses"][0]["state"]["terminated"]["exitCode"] == 3


def test_kueue_admits_a_queued_pod(real_control_plane: ControlPlane) -> None:
    cp = real_control_plane
    namespace = cp.namespace
    name = f"queued-{uuid.uuid4().hex[:6]}"
    with cp.admin_client() as client:
        response = client.post(
            f"/api/v1/namespaces/{namespace}/pods",
            json=_pod(name, "echo admitted", labels={QUEUE_LABEL: cp.local_queue}),
        )
        assert response.status_code == 201, response.text
        gates = [g["name"] for g in response.json()["spec"].get("schedulingGates") or []]
        assert "kueue.x-k8s.io/admission" in gates  # Kueue's webhook gated it

        wait_until(
            lambda: _phase(client, namespace, name) == "Succeeded", timeout=120, what="queued pod Succeeded"
        )
        pod = client.get(f"/api/v1/namespaces/{namespace}/pods/{name}").json()
        workloads = client.get(f"/apis/kueue.x-k8s.io/v1beta2/namespaces/{namespace}/workloads").json()[
            "items"
        ]
    assert not pod["spec"].get("schedulingGates")
    owned = [
        w
        for w in workloads
        if any(ref.get("uid") == pod["metadata"]["uid"] for ref in w["metadata"].get("ownerReferences") or [])
    ]
    assert len(owned) == 1
    conditions = {c["type"]: c["status"] for c in owned[0]["status"]["conditions"]}
    assert conditions.get("QuotaReserved") == "True" or conditions.get("Finished") == "True"


def test_controller_token_is_limited_by_rbac(real_control_plane: ControlPlane) -> None:
    cp = real_control_plane
    headers = {"Authorization": f"Bearer {cp.controller_token}"}
    with httpx.Client(
        base_url=cp.server_url, verify=tls_context(cp.ca_cert), headers=headers, timeout=30
    ) as client:
        assert client.get(f"/api/v1/namespaces/{cp.namespace}/pods").status_code == 200
        assert client.get("/api/v1/namespaces/kube-system/pods").status_code == 403
        assert client.get("/api/v1/namespaces/kube-system/secrets").status_code == 403
        assert client.get("/api/v1/nodes").status_code == 200


def _pod_status(client: httpx.Client, namespace: str, name: str) -> dict[str, Any]:
    return client.get(f"/api/v1/namespaces/{namespace}/pods/{name}").json().get("status") or {}


def _task_processes(marker: str) -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        if any(marker in part for part in proc.info["cmdline"] or []):
            found.append(proc)
    return found


def test_node_agent_kills_over_memory_deadline_and_deletion_and_reports_pull_failures(
    real_control_plane: ControlPlane,
) -> None:
    """What the node agent does in the kubelet's place (run side by side: one wait for all four)."""
    cp = real_control_plane
    namespace = cp.namespace
    tag = uuid.uuid4().hex[:6]
    marker = f"iris-node-agent-{tag}"
    hog = _pod(f"hog-{tag}", "python3 -c 'import time; x = bytearray(256 * 1024 * 1024); time.sleep(30)'")
    hog["spec"]["containers"][0]["resources"]["limits"] = {"memory": "64Mi"}
    slow = _pod(f"slow-{tag}", "sleep 30")
    slow["spec"]["activeDeadlineSeconds"] = 1
    noimage = _pod(f"noimage-{tag}", "true")
    noimage["spec"]["containers"][0]["image"] = "registry.example/does-not-exist:1"
    sleeper = _pod(f"sleeper-{tag}", f"sleep 300 & sleep 300 & wait  # {marker}")
    with cp.admin_client() as client:
        for pod in (hog, slow, noimage, sleeper):
            response = client.post(f"/api/v1/namespaces/{namespace}/pods", json=pod)
            assert response.status_code == 201, response.text
        try:
            wait_until(
                lambda: _phase(client, namespace, f"hog-{tag}") == "Failed", timeout=90, what="OOM kill"
            )
            state = _pod_status(client, namespace, f"hog-{tag}")["containerStatuses"][0]["state"][
                "terminated"
            ]
            assert (state["exitCode"], state["reason"]) == (137, "OOMKilled")

            wait_until(
                lambda: _phase(client, namespace, f"slow-{tag}") == "Failed", timeout=60, what="deadline"
            )
            assert _pod_status(client, namespace, f"slow-{tag}")["reason"] == "DeadlineExceeded"

            def waiting_reason() -> str:
                statuses = _pod_status(client, namespace, f"noimage-{tag}").get("containerStatuses") or [{}]
                return statuses[0].get("state", {}).get("waiting", {}).get("reason", "")

            wait_until(lambda: waiting_reason() == "ImagePullBackOff", timeout=60, what="image pull back-off")
            assert _phase(client, namespace, f"noimage-{tag}") == "Pending"

            # The shell and both background sleeps, on this machine.
            def tree() -> list[psutil.Process] | None:
                for shell in _task_processes(marker):
                    try:
                        children = shell.children(recursive=True)
                    except psutil.NoSuchProcess:
                        continue
                    if len(children) >= 2:
                        return [shell, *children]
                return None

            processes = wait_until(tree, timeout=60, what="the sleeper's shell and both sleeps")
            cp.kubectl("delete", "pod", "-n", namespace, f"sleeper-{tag}", "--grace-period=5", "--wait=true")
            wait_until(
                lambda: not [p for p in processes if _alive(p)], timeout=30, what="the pod's processes gone"
            )
        finally:
            for pod in (hog, slow, noimage, sleeper):
                cp.kubectl(
                    "delete", "pod", "-n", namespace, pod["metadata"]["name"], "--wait=false", check=False
                )


def _alive(process: psutil.Process) -> bool:
    try:
        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False
