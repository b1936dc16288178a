"""ObjectStore semantics, in process: versions, conflicts, subresources, deletion, history."""

from __future__ import annotations

from typing import Any

import pytest

from iris.testing.fake_apiserver import (
    CONFIGMAPS,
    NAMESPACES,
    PATCH_JSON,
    PATCH_MERGE,
    PODS,
    PRIORITY_CLASSES,
    WORKLOADS,
    ApiError,
    FakeApiServer,
    ObjectStore,
)
from iris.testing.fake_apiserver.resources import ResourceRegistry


@pytest.fixture
def store() -> ObjectStore:
    store = ObjectStore(ResourceRegistry(), history_size=50)
    store.create(NAMESPACES, None, {"metadata": {"name": "ns"}})
    return store


def pod(name: str = "p", **spec: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": {"app": "x"}},
        "spec": {"containers": [{"name": "c", "image": "i"}], **spec},
    }


def api_error(fn, *args, **kwargs) -> ApiError:
    with pytest.raises(ApiError) as info:
        fn(*args, **kwargs)
    return info.value


def test_create_fills_metadata_and_versions_increase(store: ObjectStore) -> None:
    a = store.create(PODS, "ns", pod("a"))
    b = store.create(CONFIGMAPS, "ns", {"metadata": {"name": "b"}})
    assert a["metadata"]["uid"] and a["metadata"]["creationTimestamp"]
    assert int(b["metadata"]["resourceVersion"]) > int(a["metadata"]["resourceVersion"])
    assert a["status"]["phase"] == "Pending" and a["spec"]["restartPolicy"] == "Always"
    generated = store.create(PODS, "ns", {"metadata": {"generateName": "job-"}, "spec": pod()["spec"]})
    assert generated["metadata"]["name"].startswith("job-") and len(generated["metadata"]["name"]) == 9


def test_duplicate_create_is_409_already_exists(store: ObjectStore) -> None:
    store.create(PODS, "ns", pod())
    error = api_error(store.create, PODS, "ns", pod())
    assert (error.code, error.reason) == (409, "AlreadyExists")
    assert error.status() == {
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": 'pods "p" already exists',
        "reason": "AlreadyExists", "code": 409, "details": {"name": "p", "kind": "pods"},
    }  # fmt: skip


def test_create_needs_an_existing_namespace_and_valid_names(store: ObjectStore) -> None:
    assert api_error(store.create, PODS, "nope", pod()).code == 404
    assert api_error(store.create, PODS, "ns", pod("Bad_Name")).code == 422
    bad_label = {"metadata": {"name": "cm", "labels": {"k": "x" * 64}}}
    assert api_error(store.create, CONFIGMAPS, "ns", bad_label).code == 422
    assert (
        api_error(store.create, PODS, "ns", {"metadata": {"name": "p"}, "spec": {"containers": []}}).code
        == 422
    )


def test_stale_update_conflicts_and_fresh_update_bumps_version(store: ObjectStore) -> None:
    created = store.create(CONFIGMAPS, "ns", {"metadata": {"name": "cm"}, "data": {"a": "1"}})
    updated = store.replace(CONFIGMAPS, "ns", "cm", {**created, "data": {"a": "2"}})
    assert int(updated["metadata"]["resourceVersion"]) > int(created["metadata"]["resourceVersion"])
    error = api_error(store.replace, CONFIGMAPS, "ns", "cm", {**created, "data": {"a": "3"}})
    assert (error.code, error.reason) == (409, "Conflict")
    assert store.get(CONFIGMAPS, "ns", "cm")["data"] == {"a": "2"}
    stale_patch = {
        "metadata": {"resourceVersion": created["metadata"]["resourceVersion"]},
        "data": {"a": "4"},
    }
    assert api_error(store.patch, CONFIGMAPS, "ns", "cm", stale_patch, PATCH_MERGE).code == 409


def test_no_op_update_keeps_the_version(store: ObjectStore) -> None:
    created = store.create(CONFIGMAPS, "ns", {"metadata": {"name": "cm"}, "data": {"a": "1"}})
    again = store.patch(CONFIGMAPS, "ns", "cm", {"data": {"a": "1"}}, PATCH_MERGE)
    assert again["metadata"]["resourceVersion"] == created["metadata"]["resourceVersion"]


def test_status_subresource_separates_spec_and_status(store: ObjectStore) -> None:
    store.create(PODS, "ns", pod())
    store.patch(
        PODS, "ns", "p", {"status": {"phase": "Running"}, "metadata": {"labels": {"b": "y"}}}, PATCH_MERGE
    )
    assert store.get(PODS, "ns", "p")["status"]["phase"] == "Pending", "main resource ignores status"
    store.patch(
        PODS,
        "ns",
        "p",
        {"status": {"phase": "Running"}, "metadata": {"labels": {"c": "z"}}},
        PATCH_MERGE,
        subresource="status",
    )
    current = store.get(PODS, "ns", "p")
    assert current["status"]["phase"] == "Running"
    assert current["metadata"]["labels"] == {"app": "x", "b": "y"}, "status subresource ignores the rest"


def test_pod_spec_is_immutable_except_gate_removal(store: ObjectStore) -> None:
    store.create(PODS, "ns", pod(schedulingGates=[{"name": "g"}]))
    error = api_error(store.patch, PODS, "ns", "p", {"spec": {"restartPolicy": "Never"}}, PATCH_MERGE)
    assert error.code == 422 and "pod updates may not change fields" in error.message
    assert (
        api_error(
            store.patch,
            PODS,
            "ns",
            "p",
            {"spec": {"schedulingGates": [{"name": "g"}, {"name": "h"}]}},
            PATCH_MERGE,
        ).code
        == 422
    )
    store.patch(
        PODS, "ns", "p", {"spec": {"nodeSelector": {"pool": "a"}}}, PATCH_MERGE
    )  # allowed while gated
    store.patch(PODS, "ns", "p", [{"op": "remove", "path": "/spec/schedulingGates"}], PATCH_JSON)
    assert "schedulingGates" not in store.get(PODS, "ns", "p")["spec"]
    assert (
        api_error(store.patch, PODS, "ns", "p", {"spec": {"nodeSelector": {"pool": "b"}}}, PATCH_MERGE).code
        == 422
    )


def test_finalizers_hold_deletion_until_removed(store: ObjectStore) -> None:
    store.create(CONFIGMAPS, "ns", {"metadata": {"name": "cm", "finalizers": ["example.com/hold"]}})
    subscription = store.subscribe(CONFIGMAPS, "ns", resource_version=str(store.resource_version))
    held = store.delete(CONFIGMAPS, "ns", "cm")
    assert held["metadata"]["deletionTimestamp"]
    assert store.get(CONFIGMAPS, "ns", "cm")["metadata"]["deletionTimestamp"]
    assert (
        api_error(
            store.patch,
            CONFIGMAPS,
            "ns",
            "cm",
            {"metadata": {"finalizers": ["example.com/hold", "new"]}},
            PATCH_MERGE,
        ).code
        == 422
    )
    store.patch(CONFIGMAPS, "ns", "cm", {"metadata": {"finalizers": None}}, PATCH_MERGE)
    assert store.try_get(CONFIGMAPS, "ns", "cm") is None
    assert [e.type for e in subscription.drain()] == ["MODIFIED", "DELETED"]


def test_bound_pods_are_deleted_gracefully_unbound_at_once(store: ObjectStore) -> None:
    store.create(PODS, "ns", pod("bound"))
    store.create(PODS, "ns", pod("unbound"))
    store.bind_pod("ns", "bound", "node-1")
    assert api_error(store.bind_pod, "ns", "bound", "node-2").code == 409
    terminating = store.delete(PODS, "ns", "bound", grace_period_seconds=30)
    assert terminating["metadata"]["deletionGracePeriodSeconds"] == 30
    assert store.try_get(PODS, "ns", "bound") is not None
    store.delete(
        PODS, "ns", "bound", grace_period_seconds=0
    )  # what the kubelet does once the container is gone
    assert store.try_get(PODS, "ns", "bound") is None
    store.delete(PODS, "ns", "unbound")
    assert store.try_get(PODS, "ns", "unbound") is None


def test_deleting_a_namespace_deletes_its_contents(store: ObjectStore) -> None:
    store.create(PODS, "ns", pod())
    store.create(CONFIGMAPS, "ns", {"metadata": {"name": "cm"}})
    store.delete(NAMESPACES, None, "ns")
    assert store.try_get(NAMESPACES, None, "ns") is None
    assert store.list(PODS).items == [] and store.list(CONFIGMAPS).items == []


def test_watch_history_replays_and_expires(store: ObjectStore) -> None:
    start = str(store.resource_version)
    store.create(CONFIGMAPS, "ns", {"metadata": {"name": "cm"}})
    replay = store.subscribe(CONFIGMAPS, "ns", resource_version=start)
    assert [(e.type, e.name) for e in replay.drain()] == [("ADDED", "cm")]
    for i in range(60):  # more changes than the history keeps
        store.patch(CONFIGMAPS, "ns", "cm", {"data": {"i": str(i)}}, PATCH_MERGE)
    error = api_error(store.subscribe, CONFIGMAPS, "ns", resource_version=start)
    assert (error.code, error.reason) == (410, "Expired")


def test_pagination_with_limit_and_continue(store: ObjectStore) -> None:
    for i in range(7):
        store.create(
            CONFIGMAPS, "ns", {"metadata": {"name": f"cm-{i}", "labels": {"even": str(i % 2 == 0).lower()}}}
        )
    names, token = [], None
    while True:
        page = store.list(CONFIGMAPS, "ns", label_selector="even=true", limit=2, continue_token=token)
        names += [o["metadata"]["name"] for o in page.items]
        token = page.continue_token
        if not token:
            break
    assert names == ["cm-0", "cm-2", "cm-4", "cm-6"]


def test_pod_priority_comes_from_its_priority_class(store: ObjectStore) -> None:
    error = api_error(store.create, PODS, "ns", pod(priorityClassName="iris-batch"))
    assert error.code == 403 and "no PriorityClass with name iris-batch" in error.message
    store.create(
        PRIORITY_CLASSES, None, {"metadata": {"name": "iris-batch"}, "value": 7, "preemptionPolicy": "Never"}
    )
    created = store.create(PODS, "ns", pod(priorityClassName="iris-batch"))
    assert (created["spec"]["priority"], created["spec"]["preemptionPolicy"]) == (7, "Never")
    assert api_error(store.patch, PRIORITY_CLASSES, None, "iris-batch", {"value": 8}, PATCH_MERGE).code == 422


def test_dry_run_persists_nothing(store: ObjectStore) -> None:
    version = store.resource_version
    store.create(PODS, "ns", pod(), dry_run=True)
    assert store.try_get(PODS, "ns", "p") is None and store.resource_version == version


def test_admission_hooks_mutate_and_reject(store: ObjectStore) -> None:
    def hook(resource, obj):
        if resource == PODS:
            if obj["metadata"]["name"] == "forbidden":
                raise ApiError(403, "Forbidden", "no")
            obj["metadata"].setdefault("labels", {})["hooked"] = "yes"

    store.add_admission_hook(hook)
    assert store.create(PODS, "ns", pod())["metadata"]["labels"]["hooked"] == "yes"
    assert api_error(store.create, PODS, "ns", pod("forbidden")).code == 403


def test_server_side_apply_creates_then_merges(store: ObjectStore) -> None:
    body = {
        "apiVersion": "kueue.x-k8s.io/v1beta1",
        "kind": "Workload",
        "metadata": {"name": "w"},
        "spec": {"queueName": "a"},
    }
    store.patch(WORKLOADS, "ns", "w", body, "application/apply-patch+yaml")
    store.patch(WORKLOADS, "ns", "w", {**body, "spec": {"queueName": "b"}}, "application/apply-patch+yaml")
    assert store.get(WORKLOADS, "ns", "w")["spec"] == {"queueName": "b"}
    assert (
        api_error(
            store.patch, WORKLOADS, "ns", "w", {"spec": {}}, "application/strategic-merge-patch+json"
        ).code
        == 415
    )


def test_server_seeds_system_namespaces_and_priority_classes() -> None:
    server = FakeApiServer()
    try:
        names = {n["metadata"]["name"] for n in server.store.list(NAMESPACES).items}
        assert {"default", "kube-system"} <= names
        assert server.store.get(PRIORITY_CLASSES, None, "system-node-critical")["value"] == 2_000_001_000
    finally:
        server.stop()
