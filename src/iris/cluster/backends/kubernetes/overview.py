"""Summaries for the dashboard's Cluster view and for process status (pure)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import Any

from iris.cluster.backends.kubernetes.naming import ANNOTATION_ATTEMPT_UID, ANNOTATION_TASK_ID
from iris.cluster.backends.kubernetes.status import is_kueue_gated


def summarize_pods(pods: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """Counts of our pods by phase, and how many Kueue still holds back."""
    by_phase: Counter[str] = Counter()
    gated = admitted_pending = deleting = 0
    for pod in pods:
        phase = (pod.get("status") or {}).get("phase") or "Pending"
        by_phase[phase] += 1
        if (pod.get("metadata") or {}).get("deletionTimestamp"):
            deleting += 1
        if phase == "Pending":
            if is_kueue_gated(pod):
                gated += 1
            else:
                admitted_pending += 1
    return {
        "total": sum(by_phase.values()),
        "by_phase": dict(sorted(by_phase.items())),
        "kueue_gated": gated,
        "admitted_pending": admitted_pending,
        "deleting": deleting,
    }


def summarize_node(node: dict[str, Any]) -> dict[str, Any]:
    metadata = node.get("metadata") or {}
    status = node.get("status") or {}
    ready = next((c for c in status.get("conditions") or [] if c.get("type") == "Ready"), None)
    return {
        "name": metadata.get("name", ""),
        "ready": ready is not None and ready.get("status") == "True",
        "unschedulable": bool((node.get("spec") or {}).get("unschedulable")),
        "allocatable": dict(status.get("allocatable") or {}),
        "capacity": dict(status.get("capacity") or {}),
        "labels": dict(metadata.get("labels") or {}),
    }


def describe_pod(pod: dict[str, Any]) -> dict[str, Any]:
    """The parts of a pod a user debugging a task wants to see."""
    metadata = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    status = pod.get("status") or {}
    annotations = metadata.get("annotations") or {}
    return {
        "pod": metadata.get("name", ""),
        "namespace": metadata.get("namespace", ""),
        "task_id": annotations.get(ANNOTATION_TASK_ID),
        "attempt_uid": annotations.get(ANNOTATION_ATTEMPT_UID),
        "phase": status.get("phase") or "Pending",
        "reason": status.get("reason"),
        "message": status.get("message"),
        "node": spec.get("nodeName"),
        "pod_ip": status.get("podIP"),
        "start_time": status.get("startTime"),
        "deletion_timestamp": metadata.get("deletionTimestamp"),
        "scheduling_gates": [g.get("name") for g in spec.get("schedulingGates") or []],
        "conditions": list(status.get("conditions") or []),
        "container_statuses": list(status.get("containerStatuses") or []),
    }


def summarize_event(event: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": event.get("type"),
        "reason": event.get("reason"),
        "message": event.get("message"),
        "count": event.get("count"),
        "last_seen": event.get("lastTimestamp") or event.get("eventTime"),
    }
