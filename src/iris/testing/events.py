"""Recording core/v1 Events about pods, as the scheduler and Kueue do (shown by ``kubectl describe``)."""

from __future__ import annotations

import uuid
from typing import Any

from iris.testing.fake_apiserver import EVENTS, ApiError, ObjectStore, utc_timestamp


def record_pod_event(
    store: ObjectStore, pod: dict[str, Any], event_type: str, reason: str, message: str, component: str
) -> None:
    """Create one Event about ``pod`` (best effort: a vanished namespace is not an error)."""
    meta = pod["metadata"]
    now = utc_timestamp()
    event = {
        "metadata": {"name": f"{meta['name']}.{uuid.uuid4().hex[:16]}", "namespace": meta["namespace"]},
        "involvedObject": {
            "kind": "Pod",
            "apiVersion": "v1",
            "namespace": meta["namespace"],
            "name": meta["name"],
            "uid": meta.get("uid", ""),
            "resourceVersion": meta.get("resourceVersion", ""),
        },
        "type": event_type,
        "reason": reason,
        "message": message,
        "source": {"component": component},
        "reportingComponent": component,
        "firstTimestamp": now,
        "lastTimestamp": now,
        "count": 1,
    }
    try:
        store.create(EVENTS, meta["namespace"], event)
    except ApiError as exc:
        if exc.code not in (403, 404):
            raise
