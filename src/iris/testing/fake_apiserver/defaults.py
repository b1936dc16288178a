"""Defaulting the API server applies to new objects (the parts clients observe)."""

from __future__ import annotations

from typing import Any

from iris.testing.k8s_quantity import container_requests


def _qos_class(pod: dict[str, Any]) -> str:
    containers = (pod.get("spec") or {}).get("containers") or []
    try:
        requests = [container_requests(c) for c in containers]
    except ValueError:  # bad quantities are reported by validation
        return "BestEffort"
    if not any(requests):
        return "BestEffort"
    guaranteed = True
    for container in containers:
        resources = container.get("resources") or {}
        limits = resources.get("limits") or {}
        reqs = resources.get("requests") or {}
        for name in ("cpu", "memory"):
            if name not in limits or (name in reqs and reqs[name] != limits[name]):
                guaranteed = False
    return "Guaranteed" if guaranteed else "Burstable"


def default_pod(pod: dict[str, Any]) -> None:
    """Fill the defaults kubelet-facing code relies on (in place)."""
    spec = pod.setdefault("spec", {})
    spec.setdefault("restartPolicy", "Always")
    spec.setdefault("terminationGracePeriodSeconds", 30)
    spec.setdefault("dnsPolicy", "ClusterFirst")
    spec.setdefault("schedulerName", "default-scheduler")
    spec.setdefault("serviceAccountName", "default")
    spec.setdefault("enableServiceLinks", True)
    spec.setdefault("preemptionPolicy", "PreemptLowerPriority")
    for container in [*(spec.get("containers") or []), *(spec.get("initContainers") or [])]:
        if not isinstance(container, dict):
            continue
        image = str(container.get("image") or "")
        tag = image.rsplit("/", 1)[-1]
        default_pull = (
            "Always" if (":" not in tag or tag.endswith(":latest")) and "@" not in tag else "IfNotPresent"
        )
        container.setdefault("imagePullPolicy", default_pull)
        container.setdefault("terminationMessagePath", "/dev/termination-log")
        container.setdefault("terminationMessagePolicy", "File")
        container.setdefault("resources", {})
        resources = container["resources"]
        limits = resources.get("limits") or {}
        if limits:
            requests = resources.setdefault("requests", {})
            for name, amount in limits.items():
                requests.setdefault(name, amount)
    pod["status"] = {"phase": "Pending", "qosClass": _qos_class(pod)}
