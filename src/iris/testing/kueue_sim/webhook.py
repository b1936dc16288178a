"""Kueue's pod webhook: gate every new pod that names a queue, so Kueue decides when it may run."""

from __future__ import annotations

from typing import Any

from iris.testing.fake_apiserver import PODS, ResourceType, utc_timestamp
from iris.testing.kueue_sim.names import ADMISSION_GATE, MANAGED_FINALIZER, MANAGED_LABEL, QUEUE_NAME_LABEL

GATED_MESSAGE = "Scheduling is blocked due to non-empty scheduling gates"


def gate_queued_pods(resource: ResourceType, obj: dict[str, Any], *, add_finalizer: bool = True) -> None:
    """Admission hook: add the admission gate, the managed label and (optionally) Kueue's finalizer."""
    if resource != PODS:
        return
    meta = obj.setdefault("metadata", {})
    labels = meta.get("labels") or {}
    if QUEUE_NAME_LABEL not in labels:
        return
    spec = obj.setdefault("spec", {})
    gates = spec.setdefault("schedulingGates", [])
    if all(g.get("name") != ADMISSION_GATE for g in gates):
        gates.append({"name": ADMISSION_GATE})
    meta["labels"] = {**labels, MANAGED_LABEL: "true"}
    if add_finalizer and MANAGED_FINALIZER not in (meta.get("finalizers") or []):
        meta["finalizers"] = [*(meta.get("finalizers") or []), MANAGED_FINALIZER]
    status = obj.setdefault("status", {"phase": "Pending"})
    status["conditions"] = [
        {
            "type": "PodScheduled",
            "status": "False",
            "reason": "SchedulingGated",
            "message": GATED_MESSAGE,
            "lastProbeTime": None,
            "lastTransitionTime": utc_timestamp(),
        }
    ]
