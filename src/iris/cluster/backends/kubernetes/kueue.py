"""Reading Kueue's Workloads: why a pod is still gated, and what is admitted (pure)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from iris.cluster.backends.kubernetes.pods import KUEUE_POD_GROUP_NAME


def _conditions(workload: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c.get("type", ""): c for c in (workload.get("status") or {}).get("conditions") or []}


def workload_is_admitted(workload: dict[str, Any]) -> bool:
    admitted = _conditions(workload).get("Admitted")
    return admitted is not None and admitted.get("status") == "True"


def workload_pending_reason(workload: dict[str, Any]) -> str | None:
    """Kueue's own words for why the workload is not admitted (None once it is)."""
    conditions = _conditions(workload)
    if workload_is_admitted(workload):
        return None
    for kind in ("Evicted", "QuotaReserved", "Admitted"):
        c = conditions.get(kind)
        if c is None:
            continue
        if kind == "Evicted" and c.get("status") != "True":
            continue
        if kind != "Evicted" and c.get("status") == "True":
            continue
        text = c.get("message") or c.get("reason")
        if text:
            return text
    spec = workload.get("spec") or {}
    queue = spec.get("queueName")
    return f"queued in LocalQueue {queue}" if queue else "queued"


# Kueue records this event on every pod it stops; for an eviction its message is the Workload's
# Evicted message ("Preempted to accommodate a workload (UID: …) due to …" for a preemption).
KUEUE_STOPPED_EVENT = "Stopped"


def kueue_preemptions(events: Iterable[dict[str, Any]]) -> dict[str, str]:
    """Pod name -> Kueue's message, for every pod Kueue stopped to preempt it."""
    found: dict[str, str] = {}
    for event in events:
        message = event.get("message") or ""
        name = (event.get("involvedObject") or {}).get("name")
        if event.get("reason") == KUEUE_STOPPED_EVENT and message.startswith("Preempted") and name:
            found[name] = message
    return found


def workload_missing_queue(workload: dict[str, Any]) -> str | None:
    """Kueue's words when the workload names a LocalQueue that does not exist: it will wait for
    ever (Kueue marks it ``Inadmissible``), so the attempt should fail instead."""
    c = _conditions(workload).get("QuotaReserved")
    if c is None or c.get("status") != "False" or c.get("reason") != "Inadmissible":
        return None
    message = c.get("message") or ""
    return message if message.startswith("LocalQueue ") and message.endswith("doesn't exist") else None


def kueue_reasons_by_pod(
    workloads: Iterable[dict[str, Any]],
    pods: Iterable[dict[str, Any]],
    reason_of: Callable[[dict[str, Any]], str | None] = workload_pending_reason,
) -> dict[str, str]:
    """Pod name -> ``reason_of`` its workload (by default Kueue's pending reason), matching
    workloads to pods by owner reference (how Kueue links plain pods) or by pod-group name
    (how it names gang workloads)."""
    by_group: dict[str, str] = {}
    by_pod: dict[str, str] = {}
    for workload in workloads:
        reason = reason_of(workload)
        if reason is None:
            continue
        metadata = workload.get("metadata") or {}
        by_group[metadata.get("name", "")] = reason
        for owner in metadata.get("ownerReferences") or []:
            if owner.get("kind") == "Pod" and owner.get("name"):
                by_pod[owner["name"]] = reason
    reasons: dict[str, str] = {}
    for pod in pods:
        metadata = pod.get("metadata") or {}
        name = metadata.get("name", "")
        group = (metadata.get("labels") or {}).get(KUEUE_POD_GROUP_NAME)
        reason = by_pod.get(name) or (by_group.get(group) if group else None)
        if reason:
            reasons[name] = reason
    return reasons


def summarize_workloads(workloads: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """A compact row per workload for the dashboard's Cluster view."""
    rows = []
    for workload in workloads:
        metadata = workload.get("metadata") or {}
        status = workload.get("status") or {}
        admission = status.get("admission") or {}
        spec = workload.get("spec") or {}
        # v1beta1 names the class directly, v1beta2 through a reference.
        priority_class = spec.get("priorityClassName") or (spec.get("priorityClassRef") or {}).get("name")
        rows.append(
            {
                "name": metadata.get("name", ""),
                "queue": spec.get("queueName"),
                "priority_class": priority_class,
                "admitted": workload_is_admitted(workload),
                "cluster_queue": admission.get("clusterQueue"),
                "reason": workload_pending_reason(workload),
                "created_at": metadata.get("creationTimestamp"),
            }
        )
    return rows
