"""Kueue's admission decision as a pure function: flavor assignment, FIFO by priority, preemption.

Input is a snapshot (cluster queues with their quota, workloads with requests, priority, order
and whether they hold quota); output is a plan: who to admit (with flavors), whom to evict for
whom, and a human-readable reason for everyone left pending. Messages follow Kueue's wording.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from fractions import Fraction

from iris.testing.k8s_quantity import format_quantity

Usage = dict[tuple[str, str], Fraction]  # (flavor, resource) -> amount reserved

NEVER = "Never"
LOWER_PRIORITY = "LowerPriority"
LOWER_OR_NEWER_EQUAL_PRIORITY = "LowerOrNewerEqualPriority"
BEST_EFFORT_FIFO = "BestEffortFIFO"
STRICT_FIFO = "StrictFIFO"
POD_SET = "main"


@dataclass(frozen=True)
class Flavor:
    name: str
    quota: Mapping[str, Fraction]


@dataclass(frozen=True)
class ResourceGroup:
    covered: frozenset[str]
    flavors: tuple[Flavor, ...]


@dataclass(frozen=True)
class QueueSpec:
    """A ClusterQueue: resource groups (flavors in preference order), preemption and queueing policy."""

    name: str
    groups: tuple[ResourceGroup, ...]
    preemption: str = NEVER
    strategy: str = BEST_EFFORT_FIFO


@dataclass(frozen=True)
class Candidate:
    """A workload as the planner sees it. ``assignment`` (resource -> flavor) is set while it holds quota."""

    key: str
    queue: str
    priority: int
    order: int
    requests: Mapping[str, Fraction]
    assignment: Mapping[str, str] | None = None
    evicting: bool = False


@dataclass(frozen=True)
class Plan:
    admit: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    evict: Mapping[str, str] = field(default_factory=dict)  # victim -> preemptor
    pending: Mapping[str, str] = field(default_factory=dict)


def _add(
    usage: Usage, requests: Mapping[str, Fraction], assignment: Mapping[str, str], sign: int = 1
) -> None:
    for resource, amount in requests.items():
        key = (assignment[resource], resource)
        usage[key] = usage.get(key, Fraction(0)) + sign * amount


def assign_flavors(
    requests: Mapping[str, Fraction], spec: QueueSpec, usage: Usage
) -> tuple[dict[str, str] | None, str]:
    """First flavor per resource group that fits; else None and Kueue's explanation."""
    assignment: dict[str, str] = {}
    for resource in requests:
        if not any(resource in group.covered for group in spec.groups):
            return (
                None,
                f"couldn't assign flavors to pod set {POD_SET}: resource {resource} unavailable in ClusterQueue",
            )
    for group in spec.groups:
        wanted = {r: a for r, a in requests.items() if r in group.covered}
        if not wanted:
            continue
        reasons: list[str] = []
        for flavor in group.flavors:
            problems = []
            for resource, amount in sorted(wanted.items()):
                quota = flavor.quota.get(resource, Fraction(0))
                used = usage.get((flavor.name, resource), Fraction(0))
                if amount > quota:
                    problems.append(
                        f"insufficient quota for {resource} in flavor {flavor.name}, request > maximum capacity "
                        f"({format_quantity(amount)} > {format_quantity(quota)})"
                    )
                elif used + amount > quota:
                    problems.append(
                        f"insufficient unused quota for {resource} in flavor {flavor.name}, "
                        f"{format_quantity(used + amount - quota)} more needed"
                    )
            if not problems:
                assignment.update({resource: flavor.name for resource in wanted})
                break
            reasons.extend(problems)
        else:
            return None, f"couldn't assign flavors to pod set {POD_SET}: " + "; ".join(reasons)
    return assignment, ""


def _may_preempt(policy: str, preemptor: Candidate, victim: Candidate) -> bool:
    if policy == LOWER_PRIORITY:
        return victim.priority < preemptor.priority
    if policy == LOWER_OR_NEWER_EQUAL_PRIORITY:
        return victim.priority < preemptor.priority or (
            victim.priority == preemptor.priority and victim.order > preemptor.order
        )
    return False


def _find_victims(
    preemptor: Candidate, spec: QueueSpec, base: Usage, holders: Sequence[Candidate]
) -> list[Candidate] | None:
    """Smallest-first set of holders whose eviction lets ``preemptor`` fit (None if none does)."""
    eligible = [h for h in holders if not h.evicting and _may_preempt(spec.preemption, preemptor, h)]
    eligible.sort(key=lambda h: (h.priority, -h.order))  # cheapest victims first: low priority, newest
    usage = dict(base)
    chosen: list[Candidate] = []
    for holder in eligible:
        assert holder.assignment is not None
        _add(usage, holder.requests, holder.assignment, -1)
        chosen.append(holder)
        if assign_flavors(preemptor.requests, spec, usage)[0] is not None:
            break
    else:
        return None
    for holder in reversed(chosen[:-1]):  # give back victims that turn out not to be needed
        assert holder.assignment is not None
        _add(usage, holder.requests, holder.assignment)
        if assign_flavors(preemptor.requests, spec, usage)[0] is not None:
            chosen.remove(holder)
        else:
            _add(usage, holder.requests, holder.assignment, -1)
    return chosen


def plan_admission(queues: Mapping[str, QueueSpec], workloads: Sequence[Candidate]) -> Plan:
    """One admission cycle over every cluster queue."""
    admit: dict[str, Mapping[str, str]] = {}
    evict: dict[str, str] = {}
    pending: dict[str, str] = {}
    for name, spec in queues.items():
        members = [w for w in workloads if w.queue == name]
        holders = [w for w in members if w.assignment is not None]
        usage: Usage = {}
        for holder in holders:
            assert holder.assignment is not None
            _add(usage, holder.requests, holder.assignment)
        waiting = sorted((w for w in members if w.assignment is None), key=lambda w: (-w.priority, w.order))
        blocked_by: str | None = None
        for workload in waiting:
            if blocked_by is not None:
                pending[workload.key] = (
                    f"StrictFIFO: waiting for workload {blocked_by}, which is ahead in the queue"
                )
                continue
            assignment, reason = assign_flavors(workload.requests, spec, usage)
            if assignment is not None:
                admit[workload.key] = assignment
                _add(usage, workload.requests, assignment)
                holders.append(replace(workload, assignment=assignment))
                continue
            leaving = [h for h in holders if h.evicting or h.key in evict]
            after_evictions = dict(usage)
            for holder in leaving:
                assert holder.assignment is not None
                _add(after_evictions, holder.requests, holder.assignment, -1)
            room, _ = assign_flavors(workload.requests, spec, after_evictions)
            if room is None:
                staying = [h for h in holders if h not in leaving]
                for victim in _find_victims(workload, spec, after_evictions, staying) or []:
                    assert victim.assignment is not None
                    evict[victim.key] = workload.key
                    leaving.append(victim)
                    _add(after_evictions, victim.requests, victim.assignment, -1)
                room, _ = assign_flavors(workload.requests, spec, after_evictions)
            if room is not None:
                # Hold the quota it waits for, so lower-priority workloads cannot take it meanwhile.
                _add(usage, workload.requests, room)
                pending[workload.key] = f"{reason}. Pending the preemption of {len(leaving)} workload(s)"
            else:
                pending[workload.key] = reason
            if spec.strategy == STRICT_FIFO:
                blocked_by = workload.key
    return Plan(admit, evict, pending)
