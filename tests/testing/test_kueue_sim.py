"""The Kueue simulator against a live fake API server (no kubelet: tests play it where needed)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from tests.conftest import wait_until

from iris.testing.conditions import get_condition
from iris.testing.fake_apiserver import (
    CLUSTER_QUEUES,
    EVENTS,
    LOCAL_QUEUES,
    NAMESPACES,
    PODS,
    RESOURCE_FLAVORS,
    WORKLOAD_PRIORITY_CLASSES,
    WORKLOADS,
    FakeApiServer,
)
from iris.testing.k8s_sandbox import cluster_queue_object
from iris.testing.kueue_sim import ADMISSION_GATE, MANAGED_FINALIZER, KueueSimulator

NS = "iris"


@pytest.fixture
def cluster() -> Iterator[tuple[FakeApiServer, KueueSimulator]]:
    server = FakeApiServer().start()
    kueue = KueueSimulator(server).start()
    store = server.store
    store.create(NAMESPACES, None, {"metadata": {"name": NS}})
    store.create(
        RESOURCE_FLAVORS,
        None,
        {"metadata": {"name": "default-flavor"}, "spec": {"nodeLabels": {"pool": "cpu"}}},
    )
    store.create(CLUSTER_QUEUES, None, cluster_queue_object({"cpu": "4", "memory": "8Gi"}))
    store.create(
        LOCAL_QUEUES, NS, {"metadata": {"name": "iris"}, "spec": {"clusterQueue": "iris-cluster-queue"}}
    )
    store.create(WORKLOAD_PRIORITY_CLASSES, None, {"metadata": {"name": "high"}, "value": 1000})
    yield server, kueue
    kueue.stop()
    server.stop()


def create_pod(
    server: FakeApiServer,
    name: str,
    cpu: str,
    *,
    group: str | None = None,
    total: int = 0,
    priority: str | None = None,
    queue: str = "iris",
    unretriable: bool = False,
) -> None:
    labels = {"kueue.x-k8s.io/queue-name": queue}
    annotations = {}
    if group:
        labels["kueue.x-k8s.io/pod-group-name"] = group
        annotations["kueue.x-k8s.io/pod-group-total-count"] = str(total)
    if unretriable:
        annotations["kueue.x-k8s.io/retriable-in-group"] = "false"
    if priority:
        labels["kueue.x-k8s.io/priority-class"] = priority
    container = {"name": "task", "image": "busybox", "resources": {"requests": {"cpu": cpu, "memory": "1Gi"}}}
    body = {
        "metadata": {"name": name, "labels": labels, "annotations": annotations},
        "spec": {"restartPolicy": "Never", "containers": [container]},
    }
    server.store.create(PODS, NS, body)


def pod(server: FakeApiServer, name: str) -> dict[str, Any] | None:
    return server.store.try_get(PODS, NS, name)


def gated(server: FakeApiServer, name: str) -> bool:
    current = pod(server, name)
    return current is not None and any(
        g["name"] == ADMISSION_GATE for g in current["spec"].get("schedulingGates") or []
    )


def admitted(server: FakeApiServer, name: str) -> bool:
    current = pod(server, name)
    return current is not None and not gated(server, name)


def quota_message(server: FakeApiServer, workload: str) -> str:
    found = server.store.try_get(WORKLOADS, NS, workload)
    condition = get_condition(found, "QuotaReserved") if found else None
    return condition["message"] if condition and condition["status"] == "False" else ""


def finish(server: FakeApiServer, name: str, phase: str = "Succeeded") -> None:
    server.store.update(
        PODS, NS, name, lambda p: {**p, "status": {**p["status"], "phase": phase}}, subresource="status"
    )


def test_gated_pod_is_admitted_when_quota_allows(cluster: tuple[FakeApiServer, KueueSimulator]) -> None:
    server, kueue = cluster
    create_pod(server, "a", "3")
    wait_until(lambda: admitted(server, "a"), timeout=5, what="a admitted")
    current = pod(server, "a")
    assert current["spec"]["nodeSelector"] == {"pool": "cpu"}, "flavor node labels are injected"
    assert MANAGED_FINALIZER in current["metadata"]["finalizers"]
    workload = server.store.get(WORKLOADS, NS, kueue.workload_name_for(current))
    assert workload["status"]["admission"]["podSetAssignments"][0]["flavors"] == {
        "cpu": "default-flavor",
        "memory": "default-flavor",
    }

    create_pod(server, "b", "2")
    b_workload = kueue.workload_name_for(pod(server, "b"))
    message = wait_until(lambda: quota_message(server, b_workload), timeout=5, what="b pending message")
    assert (
        message
        == "couldn't assign flavors to pod set main: insufficient unused quota for cpu in flavor default-flavor, 1 more needed"
    )
    assert gated(server, "b")
    finish(server, "a")
    wait_until(lambda: admitted(server, "b"), timeout=5, what="b admitted after a finished")
    wait_until(
        lambda: MANAGED_FINALIZER not in (pod(server, "a")["metadata"].get("finalizers") or []),
        timeout=5,
        what="finalizer released",
    )
    wait_until(
        lambda: (
            server.store.get(CLUSTER_QUEUES, None, "iris-cluster-queue")
            .get("status", {})
            .get("admittedWorkloads")
            == 1
        ),
        timeout=5,
        what="ClusterQueue status counts b only",
    )


def test_pod_group_waits_for_all_members_then_admits_them_together(
    cluster: tuple[FakeApiServer, KueueSimulator],
) -> None:
    server, _ = cluster
    create_pod(server, "g-0", "1", group="g", total=3)
    create_pod(server, "g-1", "1", group="g", total=3)
    wait_until(
        lambda: quota_message(server, "g") == "waiting for all pods of group g to be created (2/3)", timeout=5
    )
    assert gated(server, "g-0") and gated(server, "g-1")
    create_pod(server, "g-2", "1", group="g", total=3)
    wait_until(
        lambda: all(admitted(server, f"g-{i}") for i in range(3)), timeout=5, what="whole group admitted"
    )
    assert server.store.get(WORKLOADS, NS, "g")["status"]["admission"]["podSetAssignments"][0]["count"] == 3


def test_group_that_cannot_fit_stays_gated_whole(cluster: tuple[FakeApiServer, KueueSimulator]) -> None:
    server, _ = cluster
    for i in range(3):
        create_pod(server, f"big-{i}", "2", group="big", total=3)
    expected = "couldn't assign flavors to pod set main: insufficient quota for cpu in flavor default-flavor, request > maximum capacity (6 > 4)"
    wait_until(lambda: quota_message(server, "big") == expected, timeout=5, what="the group's quota message")
    assert all(gated(server, f"big-{i}") for i in range(3))


def used_cpu(server: FakeApiServer) -> str:
    status = server.store.get(CLUSTER_QUEUES, None, "iris-cluster-queue").get("status") or {}
    for flavor in status.get("flavorsReservation") or []:
        for resource in flavor["resources"]:
            if resource["name"] == "cpu":
                return resource["total"]
    return "0"


def finalized(server: FakeApiServer, name: str) -> bool:
    current = pod(server, name)
    return current is None or MANAGED_FINALIZER not in (current["metadata"].get("finalizers") or [])


def workload_condition(server: FakeApiServer, name: str, kind: str) -> dict[str, Any] | None:
    found = server.store.try_get(WORKLOADS, NS, name)
    return get_condition(found, kind) if found else None


@pytest.mark.parametrize("unretriable", [False, True], ids=["retriable", "unretriable"])
def test_higher_priority_group_evicts_a_lower_one(
    cluster: tuple[FakeApiServer, KueueSimulator], unretriable: bool
) -> None:
    server, _ = cluster
    for i in range(2):
        create_pod(server, f"low-{i}", "2", group="low", total=2, unretriable=unretriable)
    wait_until(lambda: all(admitted(server, f"low-{i}") for i in range(2)), timeout=5)
    for i in range(2):
        create_pod(server, f"high-{i}", "1", group="high", total=2, priority="high")
    wait_until(lambda: all(admitted(server, f"high-{i}") for i in range(2)), timeout=5, what="high admitted")
    for i in range(2):
        low = pod(server, f"low-{i}")
        assert low is not None and low["metadata"].get("deletionTimestamp"), (
            "the whole lower group is deleted"
        )
        condition = get_condition(low, "TerminationTarget")
        assert condition is not None and condition["reason"] == "WorkloadEvictedDueToPreempted"
        assert condition["message"].startswith("Preempted to accommodate a workload")
    # Kueue's job reconciler records "Stopped" on each pod it stops, with the eviction's message.
    stopped = server.store.list(EVENTS, NS, field_selector="reason=Stopped").items
    assert sorted(e["involvedObject"]["name"] for e in stopped) == ["low-0", "low-1"]
    assert all(e["message"].startswith("Preempted to accommodate") for e in stopped)
    evicted = workload_condition(server, "low", "Evicted")
    assert evicted is not None and evicted["reason"] == "Preempted"
    assert workload_condition(server, "low", "Preempted")["reason"] == "InClusterQueue"
    for i in range(2):  # play pod GC: a pod deleted before it got a node is marked Failed
        finish(server, f"low-{i}", "Failed")
    if unretriable:
        wait_until(lambda: all(pod(server, f"low-{i}") is None for i in range(2)), timeout=5, what="low gone")
        wait_until(lambda: server.store.try_get(WORKLOADS, NS, "low") is None, timeout=5, what="Workload GC")
    else:
        # Kueue waits for replacement members: the old ones stay Terminating under its finalizer.
        wait_until(
            lambda: (
                (workload_condition(server, "low", "WaitingForReplacementPods") or {}).get("status") == "True"
                or (workload_condition(server, "low", "QuotaReserved") or {}).get("status") == "False"
            ),
            timeout=5,
            what="the evicted Workload to give back its quota",
        )
        assert not any(finalized(server, f"low-{i}") for i in range(2))
        assert workload_condition(server, "low", "Finished") is None


def test_evict_api_takes_the_whole_group(cluster: tuple[FakeApiServer, KueueSimulator]) -> None:
    server, kueue = cluster
    for i in range(2):
        create_pod(server, f"e-{i}", "1", group="e", total=2, unretriable=True)
    wait_until(lambda: all(admitted(server, f"e-{i}") for i in range(2)), timeout=5)
    assert sorted(kueue.evict("e-1", reason="NodeFailures", message="node lost")) == ["e-0", "e-1"]
    condition = get_condition(pod(server, "e-0"), "TerminationTarget")
    assert (condition["reason"], condition["message"]) == ("WorkloadEvictedDueToNodeFailures", "node lost")
    for i in range(2):
        finish(server, f"e-{i}", "Failed")
    wait_until(
        lambda: pod(server, "e-0") is None and pod(server, "e-1") is None, timeout=5, what="group gone"
    )
    wait_until(lambda: server.store.try_get(WORKLOADS, NS, "e") is None, timeout=5, what="workload removed")


@pytest.mark.parametrize("unretriable", [False, True], ids=["retriable", "unretriable"])
def test_a_failed_group_finishes_only_when_marked_unretriable(
    cluster: tuple[FakeApiServer, KueueSimulator], unretriable: bool
) -> None:
    """Kueue v0.17's rule: a group finishes when all members succeeded, or when none is active
    and one is marked ``retriable-in-group: "false"``; until then it keeps quota and finalizers."""
    server, _ = cluster
    for i in range(3):
        create_pod(server, f"f-{i}", "1", group="f", total=3, unretriable=unretriable)
    wait_until(lambda: all(admitted(server, f"f-{i}") for i in range(3)), timeout=5)
    wait_until(lambda: used_cpu(server) == "3", timeout=5, what="the group's quota reserved")
    for i in range(3):
        finish(server, f"f-{i}", "Running")
    finish(server, "f-0", "Failed")
    create_pod(server, "nudge", "1")  # the simulator has certainly looked at f-0 by the time nudge is in
    wait_until(lambda: admitted(server, "nudge"), timeout=5)
    assert workload_condition(server, "f", "Finished") is None  # two members still run
    assert not finalized(server, "f-0")
    finish(server, "f-1", "Failed")
    finish(server, "f-2", "Failed")
    if unretriable:
        done = wait_until(lambda: workload_condition(server, "f", "Finished"), timeout=5, what="Finished")
        assert (done["reason"], done["message"]) == ("Succeeded", "Pods succeeded: 0/3.")
        wait_until(lambda: all(finalized(server, f"f-{i}") for i in range(3)), timeout=5, what="let go")
        wait_until(lambda: used_cpu(server) == "1", timeout=5, what="the group's quota given back")
    else:
        server.store.delete(PODS, NS, "nudge")
        wait_until(lambda: pod(server, "nudge") is None, timeout=5, what="nudge gone")
        assert workload_condition(server, "f", "Finished") is None
        assert not any(finalized(server, f"f-{i}") for i in range(3))
        assert used_cpu(server) == "3", "the failed group still holds its quota"


def test_a_plain_pod_is_let_go_once_deleted(cluster: tuple[FakeApiServer, KueueSimulator]) -> None:
    server, _ = cluster
    create_pod(server, "solo", "1")
    wait_until(lambda: admitted(server, "solo"), timeout=5)
    finish(server, "solo", "Running")
    server.store.delete(PODS, NS, "solo")
    wait_until(lambda: finalized(server, "solo"), timeout=5, what="the finalizer removed on deletion")


def test_unknown_local_queue_is_explained(cluster: tuple[FakeApiServer, KueueSimulator]) -> None:
    server, kueue = cluster
    create_pod(server, "lost", "1", queue="nope")
    name = kueue.workload_name_for(wait_until(lambda: pod(server, "lost")))
    assert wait_until(lambda: quota_message(server, name), timeout=5) == "LocalQueue nope doesn't exist"
    assert workload_condition(server, name, "QuotaReserved")["reason"] == "Inadmissible"


def test_a_deleted_workload_object_is_mirrored_again(cluster: tuple[FakeApiServer, KueueSimulator]) -> None:
    server, kueue = cluster
    create_pod(server, "w", "8")  # never fits: stays pending with a message
    name = kueue.workload_name_for(wait_until(lambda: pod(server, "w")))
    wait_until(lambda: quota_message(server, name), timeout=5)
    server.store.delete(WORKLOADS, NS, name)
    create_pod(server, "nudge", "1")  # any change makes Kueue look again
    assert "request > maximum capacity (8 > 4)" in wait_until(lambda: quota_message(server, name), timeout=5)


def test_raising_the_quota_admits_waiting_pods(cluster: tuple[FakeApiServer, KueueSimulator]) -> None:
    server, _ = cluster
    create_pod(server, "wide", "6")
    wait_until(lambda: gated(server, "wide") and server.store.list(WORKLOADS, NS).items, timeout=5)
    bigger = cluster_queue_object({"cpu": "8", "memory": "8Gi"})
    server.store.patch(
        CLUSTER_QUEUES, None, "iris-cluster-queue", {"spec": bigger["spec"]}, "application/merge-patch+json"
    )
    wait_until(lambda: admitted(server, "wide"), timeout=5, what="admitted under the new quota")
