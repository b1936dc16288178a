"""lightkube (what Iris's Kubernetes backend uses) against the fake server."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from lightkube import ApiError, Client, KubeConfig
from lightkube.generic_resource import create_global_resource, create_namespaced_resource
from lightkube.models.core_v1 import Container, PodSpec
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import ConfigMap, Pod
from lightkube.types import PatchType

from iris.testing.fake_apiserver import FakeApiServer

Workload = create_namespaced_resource("kueue.x-k8s.io", "v1beta1", "Workload", "workloads")
ClusterQueue = create_global_resource("kueue.x-k8s.io", "v1beta1", "ClusterQueue", "clusterqueues")


@pytest.fixture(scope="module")
def kube(kubeconfig: Path) -> Client:
    return Client(KubeConfig.from_file(kubeconfig))


def make_pod(name: str, labels: dict[str, str]) -> Pod:
    return Pod(
        metadata=ObjectMeta(name=name, labels=labels),
        spec=PodSpec(containers=[Container(name="c", image="busybox")]),
    )


def test_create_list_patch_delete(kube: Client, namespace: str) -> None:
    for name, app in (("a", "web"), ("b", "web"), ("c", "db")):
        kube.create(make_pod(name, {"app": app}), namespace=namespace)
    assert [p.metadata.name for p in kube.list(Pod, namespace=namespace, labels={"app": "web"})] == ["a", "b"]
    assert [p.metadata.name for p in kube.list(Pod, namespace=namespace, fields={"metadata.name": "c"})] == [
        "c"
    ]
    kube.patch(
        Pod, "a", {"metadata": {"labels": {"extra": "1"}}}, namespace=namespace, patch_type=PatchType.MERGE
    )
    kube.patch(
        Pod,
        "b",
        [{"op": "add", "path": "/metadata/labels/j", "value": "2"}],
        namespace=namespace,
        patch_type=PatchType.JSON,
    )
    assert kube.get(Pod, "a", namespace=namespace).metadata.labels == {"app": "web", "extra": "1"}
    assert kube.get(Pod, "b", namespace=namespace).metadata.labels["j"] == "2"
    kube.delete(Pod, "c", namespace=namespace)
    with pytest.raises(ApiError) as info:
        kube.get(Pod, "c", namespace=namespace)
    assert info.value.status.code == 404


def test_duplicate_create_is_409(kube: Client, namespace: str) -> None:
    kube.create(ConfigMap(metadata=ObjectMeta(name="cm"), data={"a": "1"}), namespace=namespace)
    with pytest.raises(ApiError) as info:
        kube.create(ConfigMap(metadata=ObjectMeta(name="cm")), namespace=namespace)
    assert (info.value.status.code, info.value.status.reason) == (409, "AlreadyExists")


def test_generic_kueue_resources_and_server_side_apply(kube: Client, namespace: str) -> None:
    kube.apply(
        ClusterQueue(metadata=ObjectMeta(name=f"cq-{namespace}"), spec={"namespaceSelector": {}}),
        field_manager="iris",
        force=True,
    )
    kube.apply(
        ClusterQueue(metadata=ObjectMeta(name=f"cq-{namespace}"), spec={"cohort": "x"}),
        field_manager="iris",
        force=True,
    )
    assert kube.get(ClusterQueue, f"cq-{namespace}").spec == {"namespaceSelector": {}, "cohort": "x"}
    kube.create(
        Workload(metadata=ObjectMeta(name="w"), spec={"queueName": "iris", "podSets": []}),
        namespace=namespace,
    )
    kube.patch(
        Workload.Status,
        "w",
        {"status": {"conditions": [{"type": "QuotaReserved", "status": "False"}]}},
        namespace=namespace,
        patch_type=PatchType.MERGE,
    )
    assert kube.get(Workload, "w", namespace=namespace).status["conditions"][0]["type"] == "QuotaReserved"
    assert [w.metadata.name for w in kube.list(Workload, namespace=namespace)] == ["w"]


def test_watch_and_list_pagination(kube: Client, namespace: str, api_server: FakeApiServer) -> None:
    for i in range(5):
        kube.create(ConfigMap(metadata=ObjectMeta(name=f"cm-{i}")), namespace=namespace)
    paged = kube.list(ConfigMap, namespace=namespace, chunk_size=2)
    assert [c.metadata.name for c in paged] == [f"cm-{i}" for i in range(5)]
    start = str(api_server.store.resource_version)
    events: list[tuple[str, str]] = []
    got_delete = threading.Event()

    def consume() -> None:
        for kind, obj in kube.watch(
            ConfigMap, namespace=namespace, labels={"w": "1"}, server_timeout=10, resource_version=start
        ):
            events.append((kind, obj.metadata.name))
            if kind == "DELETED":
                got_delete.set()
                return

    thread = threading.Thread(target=consume, daemon=True)
    thread.start()
    kube.create(ConfigMap(metadata=ObjectMeta(name="watched", labels={"w": "1"})), namespace=namespace)
    kube.patch(
        ConfigMap, "watched", {"metadata": {"labels": {"w": "0"}}}, namespace=namespace
    )  # leaves the selection
    assert got_delete.wait(10)
    assert events == [("ADDED", "watched"), ("DELETED", "watched")]
