"""Kueue's pod webhook: gate every new pod that names a queue, so Kueue decides when it may run,
and refuse (403, as the real ``vpod.kb.io`` does) a queue name that is no DNS-1123 subdomain."""

from __future__ import annotations

import re
from typing import Any

from iris.testing.fake_apiserver import PODS, ApiError, ResourceType, utc_timestamp
from iris.testing.kueue_sim.names import ADMISSION_GATE, MANAGED_FINALIZER, MANAGED_LABEL, QUEUE_NAME_LABEL

GATED_MESSAGE = "Scheduling is blocked due to non-empty scheduling gates"
_DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_SUBDOMAIN_RULE = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', "
    "and must start and end with an alphanumeric character (e.g. 'example.com', regex used for "
    "validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
)


def check_queue_name(queue: str) -> None:
    """Kueue's ValidateQueueName, answered the way the API server relays a webhook's denial."""
    if len(queue) > 253 or not _DNS1123_SUBDOMAIN.match(queue):
        raise ApiError(
            403,
            "Forbidden",
            f'admission webhook "vpod.kb.io" denied the request: '
            f'metadata.labels[{QUEUE_NAME_LABEL}]: Invalid value: "{queue}": {_SUBDOMAIN_RULE}',
        )


def gate_queued_pods(resource: ResourceType, obj: dict[str, Any], *, add_finalizer: bool = True) -> None:
    """Admission hook: add the admission gate, the managed label and (optionally) Kueue's finalizer."""
    if resource != PODS:
        return
    meta = obj.setdefault("metadata", {})
    labels = meta.get("labels") or {}
    if QUEUE_NAME_LABEL not in labels:
        return
    check_queue_name(labels[QUEUE_NAME_LABEL])
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
