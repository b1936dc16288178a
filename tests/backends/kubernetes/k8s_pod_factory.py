"""Pod dicts shaped like the API server's JSON, for the pure mapping and planning tests."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

T0 = 1_700_000_000.0


def iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def make_pod(
    *,
    name: str = "alice-train-0-0123456789abcdef-task",
    uid: str | None = "0123456789abcdef",
    phase: str = "Pending",
    gates: list[str] | None = None,
    node: str | None = None,
    conditions: list[dict[str, Any]] | None = None,
    container_state: dict[str, Any] | None = None,
    reason: str | None = None,
    message: str | None = None,
    deleting: bool = False,
    created: float = T0,
    labels: dict[str, str] | None = None,
) -> dict[str, Any]:
    metadata: dict[str, Any] = {
        "name": name,
        "namespace": "iris",
        "creationTimestamp": iso(created),
        "labels": {"iris.managed": "true", "iris.backend_id": "k8s", **(labels or {})},
        "annotations": {},
    }
    if uid is not None:
        metadata["labels"]["iris.attempt_uid"] = uid
        metadata["annotations"]["iris.attempt_uid"] = uid
    if deleting:
        metadata["deletionTimestamp"] = iso(created + 5)
    spec: dict[str, Any] = {"containers": [{"name": "task", "image": "python:3.11-slim"}]}
    if gates:
        spec["schedulingGates"] = [{"name": g} for g in gates]
    if node:
        spec["nodeName"] = node
    status: dict[str, Any] = {"phase": phase}
    if conditions is not None:
        status["conditions"] = conditions
    if container_state is not None:
        status["containerStatuses"] = [
            {"name": "task", "ready": False, "restartCount": 0, "state": container_state}
        ]
    if reason:
        status["reason"] = reason
    if message:
        status["message"] = message
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec, "status": status}


def scheduled(at: float = T0) -> dict[str, Any]:
    return {"type": "PodScheduled", "status": "True", "lastTransitionTime": iso(at)}


def terminated(
    exit_code: int, reason: str = "Error", *, start: float = T0 + 1, end: float = T0 + 2
) -> dict[str, Any]:
    return {
        "terminated": {
            "exitCode": exit_code,
            "reason": reason,
            "startedAt": iso(start),
            "finishedAt": iso(end),
        }
    }


def running(start: float = T0 + 1) -> dict[str, Any]:
    return {"running": {"startedAt": iso(start)}}


def waiting(reason: str, message: str = "") -> dict[str, Any]:
    return {"waiting": {"reason": reason, "message": message}}
