"""kube-scheduler's decision for one pod, as a pure function: filter nodes, then pick the least loaded.

Filters: node readiness/cordon, nodeSelector, required node affinity, NoSchedule/NoExecute taints,
and resource fit (requests against allocatable minus what bound pods use). The failure message
has the scheduler's shape: "0/3 nodes are available: 1 Insufficient cpu, 2 node(s) didn't match
Pod's node affinity/selector."
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from iris.testing.k8s_quantity import parse_quantity, pod_requests

SELECTOR_MISMATCH = "node(s) didn't match Pod's node affinity/selector"


@dataclass(frozen=True)
class NodeInfo:
    name: str
    labels: Mapping[str, str]
    allocatable: Mapping[str, Fraction]
    ready: bool = True
    unschedulable: bool = False
    taints: tuple[Mapping[str, str], ...] = ()


@dataclass(frozen=True)
class Placement:
    node: str | None
    message: str = ""


def node_info(node: dict[str, Any]) -> NodeInfo:
    status = node.get("status") or {}
    ready = any(
        c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or []
    )
    return NodeInfo(
        name=node["metadata"]["name"],
        labels=dict(node["metadata"].get("labels") or {}),
        allocatable={k: parse_quantity(v) for k, v in (status.get("allocatable") or {}).items()},
        ready=ready,
        unschedulable=bool((node.get("spec") or {}).get("unschedulable")),
        taints=tuple((node.get("spec") or {}).get("taints") or ()),
    )


def _match_expression(expression: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    key, operator, values = (
        expression.get("key", ""),
        expression.get("operator", ""),
        expression.get("values") or [],
    )
    present, value = key in labels, labels.get(key)
    if operator == "In":
        return present and value in values
    if operator == "NotIn":
        return not present or value not in values
    if operator == "Exists":
        return present
    if operator == "DoesNotExist":
        return not present
    if operator in ("Gt", "Lt") and present and values:
        try:
            number, bound = int(value or ""), int(values[0])
        except ValueError:
            return False
        return number > bound if operator == "Gt" else number < bound
    return False


def matches_node_selection(pod: dict[str, Any], labels: Mapping[str, str]) -> bool:
    spec = pod.get("spec") or {}
    if any(labels.get(k) != v for k, v in (spec.get("nodeSelector") or {}).items()):
        return False
    required = (
        ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
            "requiredDuringSchedulingIgnoredDuringExecution"
        )
    ) or {}
    terms = required.get("nodeSelectorTerms") or []
    if not terms:
        return True
    return any(
        all(_match_expression(e, labels) for e in term.get("matchExpressions") or []) for term in terms
    )


def _tolerated(taint: Mapping[str, str], tolerations: Sequence[Mapping[str, Any]]) -> bool:
    for toleration in tolerations:
        if toleration.get("effect") and toleration.get("effect") != taint.get("effect"):
            continue
        if toleration.get("operator") == "Exists":
            if not toleration.get("key") or toleration.get("key") == taint.get("key"):
                return True
        elif toleration.get("key") == taint.get("key") and toleration.get("value", "") == taint.get(
            "value", ""
        ):
            return True
    return False


def _untolerated_taint(pod: dict[str, Any], node: NodeInfo) -> Mapping[str, str] | None:
    tolerations = (pod.get("spec") or {}).get("tolerations") or []
    for taint in node.taints:
        if taint.get("effect") in ("NoSchedule", "NoExecute") and not _tolerated(taint, tolerations):
            return taint
    return None


def schedule_pod(
    pod: dict[str, Any], nodes: Sequence[NodeInfo], used: Mapping[str, Mapping[str, Fraction]]
) -> Placement:
    """Pick a node for ``pod``; ``used`` is node -> resource -> amount requested by pods bound there."""
    if not nodes:
        return Placement(None, "no nodes available to schedule pods")
    requests = {**pod_requests(pod), "pods": Fraction(1)}
    reasons: Counter[str] = Counter()
    feasible: list[tuple[Fraction, str]] = []
    for node in nodes:
        node_reasons: list[str] = []
        if not node.ready:
            node_reasons.append("node(s) were not ready")
        elif node.unschedulable:
            node_reasons.append("node(s) were unschedulable")
        elif not matches_node_selection(pod, node.labels):
            node_reasons.append(SELECTOR_MISMATCH)
        elif (taint := _untolerated_taint(pod, node)) is not None:
            node_reasons.append(
                f"node(s) had untolerated taint {{{taint.get('key')}: {taint.get('value', '')}}}"
            )
        else:
            node_used = used.get(node.name, {})
            for resource, amount in sorted(requests.items()):
                free = node.allocatable.get(resource, Fraction(0)) - node_used.get(resource, Fraction(0))
                if amount > free:
                    node_reasons.append("Too many pods" if resource == "pods" else f"Insufficient {resource}")
        if node_reasons:
            reasons.update(node_reasons)
            continue
        cpu = node.allocatable.get("cpu", Fraction(0))
        free_share = (cpu - used.get(node.name, {}).get("cpu", Fraction(0))) / cpu if cpu else Fraction(0)
        feasible.append((-free_share, node.name))
    if feasible:
        return Placement(min(feasible)[1])
    detail = ", ".join(f"{count} {reason}" for reason, count in sorted(reasons.items()))
    return Placement(None, f"0/{len(nodes)} nodes are available: {detail}.")
