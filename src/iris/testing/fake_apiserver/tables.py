"""``meta.k8s.io/v1`` Table rendering, which ``kubectl get`` asks for to print human tables."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from typing import Any

from iris.testing.fake_apiserver.resources import (
    CLUSTER_QUEUES,
    EVENTS,
    LOCAL_QUEUES,
    NAMESPACES,
    NODES,
    PODS,
    WORKLOADS,
    ResourceType,
)

Column = tuple[str, str, Callable[[dict[str, Any]], Any], int]  # name, type, cell, priority


def human_duration(seconds: float) -> str:
    """kubectl's compact age: 45s, 3m12s, 17m, 5h3m, 2d4h, 12d."""
    s = int(max(seconds, 0))
    if s < 120:
        return f"{s}s"
    minutes = s // 60
    if minutes < 10:
        return f"{minutes}m{s % 60}s" if s % 60 else f"{minutes}m"
    if minutes < 180:
        return f"{minutes}m"
    hours = minutes // 60
    if hours < 8:
        return f"{hours}h{minutes % 60}m" if minutes % 60 else f"{hours}h"
    if hours < 48:
        return f"{hours}h"
    days = hours // 24
    if days < 8:
        return f"{days}d{hours % 24}h" if hours % 24 else f"{days}d"
    return f"{days}d"


def _age_of(timestamp: str | None) -> str:
    if not timestamp:
        return "<unknown>"
    try:
        moment = dt.datetime.strptime(timestamp, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=dt.UTC)
    except ValueError:
        return "<unknown>"
    return human_duration((dt.datetime.now(dt.UTC) - moment).total_seconds())


def _age(obj: dict[str, Any]) -> str:
    return _age_of(obj["metadata"].get("creationTimestamp"))


def _condition_status(obj: dict[str, Any], kind: str) -> str:
    for condition in (obj.get("status") or {}).get("conditions") or []:
        if condition.get("type") == kind:
            return str(condition.get("status", ""))
    return ""


def pod_status_text(pod: dict[str, Any]) -> str:
    """The STATUS column of ``kubectl get pods``."""
    status = pod.get("status") or {}
    reason = status.get("reason") or status.get("phase") or "Unknown"
    if (pod.get("spec") or {}).get("schedulingGates"):
        reason = "SchedulingGated"
    running = False
    for container in reversed(status.get("containerStatuses") or []):
        state = container.get("state") or {}
        if (waiting := state.get("waiting")) and waiting.get("reason"):
            reason = waiting["reason"]
        elif terminated := state.get("terminated"):
            if terminated.get("reason"):
                reason = terminated["reason"]
            elif terminated.get("signal"):
                reason = f"Signal:{terminated['signal']}"
            else:
                reason = f"ExitCode:{terminated.get('exitCode', 0)}"
        elif state.get("running") and container.get("ready"):
            running = True
    if reason == "Completed" and running:
        reason = "Running"
    if pod["metadata"].get("deletionTimestamp"):
        reason = "Terminating"
    return reason


def _pod_ready(pod: dict[str, Any]) -> str:
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    total = len((pod.get("spec") or {}).get("containers") or [])
    return f"{sum(1 for c in statuses if c.get('ready'))}/{total}"


def _pod_restarts(pod: dict[str, Any]) -> int:
    return sum(
        int(c.get("restartCount") or 0) for c in (pod.get("status") or {}).get("containerStatuses") or []
    )


def _node_status(node: dict[str, Any]) -> str:
    ready = _condition_status(node, "Ready")
    text = "Ready" if ready == "True" else "NotReady" if ready else "Unknown"
    if (node.get("spec") or {}).get("unschedulable"):
        text += ",SchedulingDisabled"
    return text


def _involved(event: dict[str, Any]) -> str:
    involved = event.get("involvedObject") or {}
    return f"{str(involved.get('kind', '')).lower()}/{involved.get('name', '')}"


_NAME: Column = ("Name", "string", lambda o: o["metadata"]["name"], 0)
_AGE: Column = ("Age", "string", _age, 0)
_COLUMNS: dict[str, list[Column]] = {
    PODS.key: [
        _NAME,
        ("Ready", "string", _pod_ready, 0),
        ("Status", "string", pod_status_text, 0),
        ("Restarts", "integer", _pod_restarts, 0),
        _AGE,
        ("IP", "string", lambda o: (o.get("status") or {}).get("podIP") or "<none>", 1),
        ("Node", "string", lambda o: (o.get("spec") or {}).get("nodeName") or "<none>", 1),
    ],
    NODES.key: [
        _NAME,
        ("Status", "string", _node_status, 0),
        ("Roles", "string", lambda o: "<none>", 0),
        _AGE,
        (
            "Version",
            "string",
            lambda o: ((o.get("status") or {}).get("nodeInfo") or {}).get("kubeletVersion", ""),
            0,
        ),
    ],
    NAMESPACES.key: [
        _NAME,
        ("Status", "string", lambda o: (o.get("status") or {}).get("phase", ""), 0),
        _AGE,
    ],
    EVENTS.key: [
        (
            "Last Seen",
            "string",
            lambda o: _age_of(o.get("lastTimestamp") or o["metadata"].get("creationTimestamp")),
            0,
        ),
        ("Type", "string", lambda o: o.get("type", ""), 0),
        ("Reason", "string", lambda o: o.get("reason", ""), 0),
        ("Object", "string", _involved, 0),
        ("Message", "string", lambda o: o.get("message", ""), 0),
    ],
    WORKLOADS.key: [
        _NAME,
        ("Queue", "string", lambda o: (o.get("spec") or {}).get("queueName", ""), 0),
        (
            "Reserved in",
            "string",
            lambda o: ((o.get("status") or {}).get("admission") or {}).get("clusterQueue", ""),
            0,
        ),
        ("Admitted", "string", lambda o: _condition_status(o, "Admitted"), 0),
        ("Finished", "string", lambda o: _condition_status(o, "Finished"), 0),
        _AGE,
    ],
    CLUSTER_QUEUES.key: [
        _NAME,
        ("Cohort", "string", lambda o: (o.get("spec") or {}).get("cohort", ""), 0),
        ("Pending Workloads", "integer", lambda o: (o.get("status") or {}).get("pendingWorkloads", 0), 0),
        ("Admitted Workloads", "integer", lambda o: (o.get("status") or {}).get("admittedWorkloads", 0), 0),
    ],
    LOCAL_QUEUES.key: [
        _NAME,
        ("ClusterQueue", "string", lambda o: (o.get("spec") or {}).get("clusterQueue", ""), 0),
        ("Pending Workloads", "integer", lambda o: (o.get("status") or {}).get("pendingWorkloads", 0), 0),
        ("Admitted Workloads", "integer", lambda o: (o.get("status") or {}).get("admittedWorkloads", 0), 0),
    ],
}


def render_table(
    resource: ResourceType, items: list[dict[str, Any]], list_meta: dict[str, Any], include_object: str
) -> dict[str, Any]:
    columns = _COLUMNS.get(resource.key, [_NAME, _AGE])
    rows = []
    for obj in items:
        if include_object == "None":
            embedded: dict[str, Any] | None = None
        elif include_object == "Object":
            embedded = obj
        else:
            embedded = {
                "kind": "PartialObjectMetadata",
                "apiVersion": "meta.k8s.io/v1",
                "metadata": obj["metadata"],
            }
        row: dict[str, Any] = {"cells": [cell(obj) for _, _, cell, _ in columns]}
        if embedded is not None:
            row["object"] = embedded
        rows.append(row)
    return {
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": list_meta,
        "columnDefinitions": [
            {
                "name": name,
                "type": kind,
                "format": "name" if name == "Name" else "",
                "description": name,
                "priority": priority,
            }
            for name, kind, _, priority in columns
        ],
        "rows": rows,
    }
