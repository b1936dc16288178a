"""The official ``kubernetes`` client against the fake server, over HTTPS with a bearer token."""

from __future__ import annotations

import ssl
import threading
from pathlib import Path

import httpx
import pytest
from kubernetes import client, config, watch
from tests.testing.conftest import TOKEN

from iris.testing.fake_apiserver import FakeApiServer, write_kubeconfig


@pytest.fixture(scope="module")
def core(kubeconfig: Path) -> client.CoreV1Api:
    api_client = config.new_client_from_config(config_file=str(kubeconfig))
    return client.CoreV1Api(api_client)


def pod(name: str, labels: dict[str, str] | None = None) -> dict:
    return {
        "metadata": {"name": name, "labels": labels or {}},
        "spec": {"containers": [{"name": "c", "image": "busybox"}]},
    }


def test_crud_with_label_selectors(core: client.CoreV1Api, namespace: str) -> None:
    core.create_namespaced_pod(namespace, pod("a", {"app": "web", "tier": "front"}))
    core.create_namespaced_pod(namespace, pod("b", {"app": "web", "tier": "back"}))
    core.create_namespaced_pod(namespace, pod("c", {"app": "db"}))

    def names(selector: str) -> list[str]:
        return [p.metadata.name for p in core.list_namespaced_pod(namespace, label_selector=selector).items]

    assert names("app=web") == ["a", "b"]
    assert names("app in (web,db),tier!=back") == ["a", "c"]
    assert names("!tier") == ["c"]
    patched = core.patch_namespaced_pod("a", namespace, {"metadata": {"labels": {"tier": None, "x": "1"}}})
    assert patched.metadata.labels == {"app": "web", "x": "1"}
    assert core.read_namespaced_pod("a", namespace).metadata.labels["x"] == "1"
    core.delete_namespaced_pod("c", namespace)
    with pytest.raises(client.ApiException) as info:
        core.read_namespaced_pod("c", namespace)
    assert info.value.status == 404
    by_field = core.list_namespaced_pod(
        namespace, field_selector="metadata.name=b,status.phase=Pending"
    ).items
    assert [p.metadata.name for p in by_field] == ["b"]


def test_conflicts_are_409(core: client.CoreV1Api, namespace: str) -> None:
    created = core.create_namespaced_config_map(namespace, {"metadata": {"name": "cm"}, "data": {"v": "1"}})
    with pytest.raises(client.ApiException) as duplicate:
        core.create_namespaced_config_map(namespace, {"metadata": {"name": "cm"}})
    assert (duplicate.value.status, duplicate.value.reason) == (409, "Conflict")
    assert '"reason":"AlreadyExists"' in duplicate.value.body
    created.data = {"v": "2"}
    core.replace_namespaced_config_map("cm", namespace, created)
    created.data = {"v": "3"}  # still carries the old resourceVersion
    with pytest.raises(client.ApiException) as stale:
        core.replace_namespaced_config_map("cm", namespace, created)
    assert stale.value.status == 409 and '"reason":"Conflict"' in stale.value.body


def test_pagination(core: client.CoreV1Api, namespace: str) -> None:
    for i in range(5):
        core.create_namespaced_config_map(namespace, {"metadata": {"name": f"cm-{i}"}})
    first = core.list_namespaced_config_map(namespace, limit=2)
    assert len(first.items) == 2 and first.metadata._continue and first.metadata.remaining_item_count == 3
    rest = core.list_namespaced_config_map(namespace, limit=10, _continue=first.metadata._continue)
    assert [c.metadata.name for c in first.items + rest.items] == [f"cm-{i}" for i in range(5)]
    assert rest.metadata._continue is None


def test_watch_streams_changes(core: client.CoreV1Api, namespace: str) -> None:
    start = core.list_namespaced_pod(namespace).metadata.resource_version
    seen: list[tuple[str, str]] = []
    stream = watch.Watch()
    done = threading.Event()

    def consume() -> None:
        for event in stream.stream(
            core.list_namespaced_pod, namespace, resource_version=start, timeout_seconds=10
        ):
            seen.append((event["type"], event["object"].metadata.name))
            if event["type"] == "DELETED":
                stream.stop()
        done.set()

    thread = threading.Thread(target=consume, daemon=True)
    thread.start()
    core.create_namespaced_pod(namespace, pod("w"))
    core.patch_namespaced_pod("w", namespace, {"metadata": {"labels": {"k": "v"}}})
    core.delete_namespaced_pod("w", namespace)
    assert done.wait(10)
    assert seen == [("ADDED", "w"), ("MODIFIED", "w"), ("DELETED", "w")]


def test_expired_watch_is_410(tmp_path: Path) -> None:
    with FakeApiServer(history_size=5) as small:
        core = client.CoreV1Api(
            config.new_client_from_config(config_file=str(write_kubeconfig(tmp_path / "kc", small.url, None)))
        )
        start = core.list_namespaced_config_map("default").metadata.resource_version
        core.create_namespaced_config_map("default", {"metadata": {"name": "cm"}})
        for i in range(10):  # more changes than the history keeps
            core.patch_namespaced_config_map("cm", "default", {"data": {"i": str(i)}})
        with pytest.raises(client.ApiException) as info:
            for _ in watch.Watch().stream(
                core.list_namespaced_config_map, "default", resource_version=start, timeout_seconds=2
            ):
                pass
        assert info.value.status == 410


def test_finalizers_hold_deletion(core: client.CoreV1Api, namespace: str) -> None:
    core.create_namespaced_config_map(
        namespace, {"metadata": {"name": "held", "finalizers": ["example.com/keep"]}}
    )
    core.delete_namespaced_config_map("held", namespace)
    held = core.read_namespaced_config_map("held", namespace)
    assert held.metadata.deletion_timestamp is not None
    core.patch_namespaced_config_map("held", namespace, [{"op": "remove", "path": "/metadata/finalizers"}])
    with pytest.raises(client.ApiException) as info:
        core.read_namespaced_config_map("held", namespace)
    assert info.value.status == 404


def test_missing_or_wrong_token_is_401_and_discovery_needs_none_else(api_server: FakeApiServer) -> None:
    assert api_server.tls_material is not None
    ca = ssl.create_default_context(cafile=str(api_server.tls_material.ca_cert))
    for headers in ({}, {"Authorization": "Bearer wrong"}):
        response = httpx.get(f"{api_server.url}/api/v1/namespaces", headers=headers, verify=ca)
        assert response.status_code == 401 and response.json()["reason"] == "Unauthorized"
    ok = httpx.get(
        f"{api_server.url}/apis/kueue.x-k8s.io/v1beta1",
        headers={"Authorization": f"Bearer {TOKEN}"},
        verify=ca,
    )
    kinds = {r["kind"] for r in ok.json()["resources"]}
    assert {"Workload", "ClusterQueue", "LocalQueue", "ResourceFlavor", "WorkloadPriorityClass"} <= kinds
    assert httpx.get(f"{api_server.url}/healthz", verify=ca).text == "ok"
