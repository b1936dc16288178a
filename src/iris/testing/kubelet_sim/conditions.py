"""Helpers for ``status.conditions`` lists (pure; keep lastTransitionTime stable when nothing changes)."""

from __future__ import annotations

from typing import Any

from iris.testing.kubelet_sim.k8s_types import utc_timestamp


def set_condition(
    conditions: list[dict[str, Any]] | None, kind: str, status: str, reason: str, message: str
) -> list[dict[str, Any]]:
    """A new list with condition ``kind`` set; the transition time moves only when ``status`` changes."""
    result = [dict(c) for c in conditions or []]
    for condition in result:
        if condition.get("type") == kind:
            if condition.get("status") != status:
                condition["lastTransitionTime"] = utc_timestamp()
            condition.update(status=status, reason=reason, message=message)
            return result
    result.append(
        {
            "type": kind,
            "status": status,
            "reason": reason,
            "message": message,
            "lastTransitionTime": utc_timestamp(),
        }
    )
    return result


def get_condition(obj: dict[str, Any], kind: str) -> dict[str, Any] | None:
    for condition in (obj.get("status") or {}).get("conditions") or []:
        if condition.get("type") == kind:
            return condition
    return None
