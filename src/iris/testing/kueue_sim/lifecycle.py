"""When Kueue's pod integration finishes a Workload and lets go of its pods (pure).

The rules of Kueue v0.17 (``pkg/controller/jobs/pod/pod_controller.go``):

- a plain pod's Workload finishes when the pod is terminal; its finalizer goes once the pod is
  terminal or being deleted;
- a pod group's Workload finishes when as many members succeeded as the group's total count, or
  when no member is still active (all Succeeded/Failed) and at least one member carries
  ``retriable-in-group: "false"``. Until then a failed member waits for a replacement: it keeps
  its finalizer (a deleted one stays Terminating) and the Workload keeps its quota. Once a
  replacement exists, the oldest failed members are let go. When the Workload finishes, every
  member is let go;
- an evicted Workload keeps its quota while a member still runs; a plain pod's is freed at once.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from iris.testing.kueue_sim.names import MANAGED_FINALIZER, RETRIABLE_IN_GROUP_ANNOTATION

_TERMINAL = ("Succeeded", "Failed")


@dataclass(frozen=True)
class Finish:
    success: bool
    message: str


def phase(pod: dict[str, Any]) -> str:
    return (pod.get("status") or {}).get("phase") or "Pending"


def is_terminal(pod: dict[str, Any]) -> bool:
    return phase(pod) in _TERMINAL


def is_deleting(pod: dict[str, Any]) -> bool:
    return bool(pod["metadata"].get("deletionTimestamp"))


def is_unretriable(pod: dict[str, Any]) -> bool:
    return (pod["metadata"].get("annotations") or {}).get(RETRIABLE_IN_GROUP_ANNOTATION) == "false"


def holds_finalizer(pod: dict[str, Any]) -> bool:
    return MANAGED_FINALIZER in (pod["metadata"].get("finalizers") or [])


def runnable(pod: dict[str, Any]) -> bool:
    """Kueue's "active" member of a group: not Failed, and not deleted before it got a node."""
    if is_deleting(pod) and not (pod.get("spec") or {}).get("nodeName"):
        return False
    return phase(pod) != "Failed"


def workload_finish(pods: list[dict[str, Any]], *, group: bool, total: int) -> Finish | None:
    """The Finished condition Kueue writes for these members, or None while it is not finished."""
    if not pods:
        return None
    if not group:
        pod = pods[0]
        if not is_terminal(pod):
            return None
        return Finish(phase(pod) == "Succeeded", (pod.get("status") or {}).get("message") or "")
    succeeded = sum(1 for p in pods if phase(p) == "Succeeded")
    done = not any(not is_terminal(p) for p in pods)
    if succeeded >= total or (done and any(is_unretriable(p) for p in pods)):
        # Kueue reports a finished group as a success whatever its members did.
        return Finish(True, f"Pods succeeded: {succeeded}/{total}.")
    return None


def pods_to_let_go(
    pods: list[dict[str, Any]], *, group: bool, total: int, finished: bool
) -> list[dict[str, Any]]:
    """The members whose managed finalizer Kueue removes now."""
    holding = [p for p in pods if holds_finalizer(p)]
    if finished:
        return holding
    if not group:
        return [p for p in holding if is_terminal(p) or is_deleting(p)]
    active = [p for p in pods if runnable(p)]
    inactive = sorted(
        (p for p in pods if not runnable(p)),
        key=lambda p: (p["metadata"].get("creationTimestamp") or "", p["metadata"]["name"]),
    )
    replaced = min(len(inactive), len(inactive) + len(active) - total)
    return [p for p in inactive[:replaced] if holds_finalizer(p)] if replaced > 0 else []


def any_running(pods: list[dict[str, Any]]) -> bool:
    """Kueue's IsActive for a group: some member is Running (an evicted group holds quota till then)."""
    return any(phase(p) == "Running" for p in pods)
