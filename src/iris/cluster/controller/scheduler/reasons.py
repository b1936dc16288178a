"""Why a shape, a gang or a preemptor is still pending, in words a person can act on.

Each function runs once per shape or gang per pass, never per task. Reasons are checked in the
order a person would fix them: no workers at all, constraints, taints, device kind, capacity
that can never fit ("exceeds_capacity"), and only then capacity that is busy ("resources").
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from iris.rpc.models import Constraint

from .constraints import predicate
from .fleet import Fleet, Shape
from .formatting import format_bytes, format_cpu, format_devices, plural, quote_list
from .model import ReasonCode, Resources

Reason = tuple[str, str]  # (code, message)


def _has(count: int) -> str:
    return "has" if count == 1 else "have"


# ---------------------------------------------------------------- one dimension at a time


@dataclass(frozen=True, slots=True)
class _Dimension:
    """A resource dimension: how a need reads, how an amount reads, where its numbers live."""

    noun: str
    need: int
    amount: Callable[[int], str]
    capacity: list[int]
    free: list[int]

    def describe_need(self) -> str:
        return self.amount(self.need) if self.noun in ("cpu", "") else f"{self.amount(self.need)} {self.noun}"


def _dimensions(fleet: Fleet, r: Resources) -> list[_Dimension]:
    dims: list[_Dimension] = []
    if r.cpu_millicores > 0:
        dims.append(_Dimension("cpu", r.cpu_millicores, format_cpu, fleet.cap_cpu, fleet.free_cpu))
    if r.memory_bytes > 0:
        dims.append(_Dimension("memory", r.memory_bytes, format_bytes, fleet.cap_mem, fleet.free_mem))
    if r.disk_bytes > 0:
        dims.append(_Dimension("disk", r.disk_bytes, format_bytes, fleet.cap_disk, fleet.free_disk))
    if r.device_count > 0:

        def devices(count: int) -> str:
            return format_devices(count, r.device_type, r.device_variant)

        dims.append(_Dimension("", r.device_count, devices, fleet.cap_dev, fleet.free_dev))
    return dims


def _worker_word(shape: Shape) -> str:
    return "matching worker" if shape.constraints or shape.resources.device_type else "worker"


# ---------------------------------------------------------------- shapes


def shape_reason(fleet: Fleet, shape: Shape) -> Reason:
    """Why tasks of ``shape`` are not placed: the static cause if no worker could ever take one,
    else which resource is short right now."""
    if not shape.feasible:
        return static_reason(fleet, shape)
    return busy_reason(fleet, shape)


def static_reason(fleet: Fleet, shape: Shape) -> Reason:
    total = len(fleet)
    if total == 0:
        return ReasonCode.NO_WORKERS, "no workers registered"
    if not fleet.schedulable:
        return (
            ReasonCode.NO_WORKERS,
            f"none of the {plural(total, 'registered worker')} is schedulable (degraded, unhealthy or draining)",
        )
    if not shape.eligible:
        mask = fleet.constraints_mask(shape.constraints)
        if mask == 0:
            return ReasonCode.CONSTRAINTS, constraint_message(fleet, shape.constraints)
        return ReasonCode.CONSTRAINTS, taint_message(fleet, shape.constraints, mask)
    r = shape.resources
    offering = [i for i in shape.eligible if fleet.offers_device(i, r)]
    if not offering:
        return ReasonCode.CONSTRAINTS, device_message(fleet, shape)
    return ReasonCode.EXCEEDS_CAPACITY, capacity_message(fleet, shape, offering)


def constraint_message(fleet: Fleet, constraints: Sequence[Constraint]) -> str:
    for constraint in constraints:
        if fleet.constraint_mask(constraint) == 0:
            summary = value_summary(fleet, constraint.key)
            idle = unschedulable_matching(fleet, constraint)
            if idle:  # the workers that would do are there, only not taking work now
                summary += (
                    f"; {plural(idle, 'worker')} that {'does' if idle == 1 else 'do'} cannot take work now"
                    " (degraded, unhealthy or draining)"
                )
            return f"no worker satisfies {constraint.describe()} ({summary})"
    counts = ", ".join(
        f"{c.describe()}: {plural(fleet.constraint_mask(c).bit_count(), 'worker')}" for c in constraints
    )
    together = ", ".join(c.describe() for c in constraints)
    return f"no worker satisfies all of {together} together ({counts})"


def unschedulable_matching(fleet: Fleet, constraint: Constraint) -> int:
    """Workers that satisfy ``constraint`` but are not schedulable (e.g. DEGRADED by a full disk)."""
    ok = predicate(constraint)
    taking = set(fleet.schedulable)
    return sum(
        1 for i in range(len(fleet)) if i not in taking and ok(fleet.attributes[i].get(constraint.key))
    )


def value_summary(fleet: Fleet, key: str) -> str:
    """How schedulable workers are labelled on ``key``: "3 workers have zone=eu-west, 1 has ..."."""
    values = Counter(fleet.attributes[i].get(key) for i in fleet.schedulable)
    missing = values.pop(None, 0)
    if not values:
        return f"no worker has attribute {key}"
    ranked = sorted(values.items(), key=lambda item: (-item[1], str(item[0])))
    parts: list[str] = []
    for n, (value, count) in enumerate(ranked[:3]):
        who = plural(count, "worker") if n == 0 else str(count)
        parts.append(f"{who} {_has(count)} {key}={value}")
    if len(ranked) > 3:
        parts.append(f"{plural(len(ranked) - 3, 'other value')}")
    if missing:
        parts.append(f"{missing} {_has(missing)} no {key}")
    return ", ".join(parts)


def taint_message(fleet: Fleet, constraints: Sequence[Constraint], mask: int) -> str:
    matching = [i for i in fleet.schedulable if mask >> i & 1]
    taints = Counter(t for i in matching for t in fleet.untolerated(i, constraints))
    listed = ", ".join(
        f"{taint} on {count}" for taint, count in sorted(taints.items(), key=lambda kv: -kv[1])
    )
    n = len(matching)
    return (
        f"{plural(n, 'worker')} {'matches' if n == 1 else 'match'} its constraints but "
        f"{'carries' if n == 1 else 'carry'} taints it does not tolerate ({listed}); "
        "tolerate a taint with an EXISTS constraint on its key"
    )


def device_message(fleet: Fleet, shape: Shape) -> str:
    r = shape.resources
    offers = Counter(_device_kind(fleet.dev_type[i], fleet.dev_variant[i]) for i in shape.eligible)
    parts = [
        f"{count} {_has(count)} {offer}" if offer else f"{count} {_has(count)} no device"
        for offer, count in sorted(offers.items(), key=lambda kv: -kv[1])
    ]
    return (
        f"needs {format_devices(r.device_count, r.device_type, r.device_variant)}; "
        f"no {_worker_word(shape)} offers that device ({', '.join(parts)})"
    )


def _device_kind(device_type: str, variant: str) -> str:
    if not device_type:
        return ""
    return f"{device_type} ({variant})" if variant else device_type


def capacity_message(fleet: Fleet, shape: Shape, offering: list[int]) -> str:
    dims = _dimensions(fleet, shape.resources)
    for dim in dims:
        best = max(dim.capacity[i] for i in offering)
        if best < dim.need:
            return f"needs {dim.describe_need()}; no {_worker_word(shape)} has more than {dim.amount(best)} capacity"
    return f"needs {shape.resources.describe()}; no {_worker_word(shape)} has all of that capacity at once"


def busy_reason(fleet: Fleet, shape: Shape) -> Reason:
    """Tasks of ``shape`` would fit some worker when empty; say which resource is short now."""
    feasible = shape.feasible
    count = len(feasible)
    could = f"{plural(count, 'worker')} that could run it"
    for dim in _dimensions(fleet, shape.resources):
        free = dim.free
        best = max(feasible, key=free.__getitem__)
        if free[best] < dim.need:
            if free[best] <= 0:
                noun = dim.noun or shape.resources.device_type or "device"
                return ReasonCode.RESOURCES, f"needs {dim.describe_need()}; no {noun} is free on the {could}"
            return (
                ReasonCode.RESOURCES,
                f"needs {dim.describe_need()}; the largest free is {dim.amount(free[best])} on {fleet.ids[best]}",
            )
    return (
        ReasonCode.RESOURCES,
        f"needs {shape.resources.describe()}; none of the {could} has all of that free now",
    )


# ---------------------------------------------------------------- gangs and preemptors


def gang_reason(
    size: int,
    attribute: str,
    shape: Shape,
    groups: dict[str, list[int]],
    fitting: dict[str, int],
) -> Reason:
    """Why no group of workers sharing ``attribute`` can take the whole gang now."""
    needs = f"needs {plural(size, 'worker')} with the same {attribute}"
    if not groups:
        return (
            ReasonCode.GANG,
            f"{needs}; none of the {plural(len(shape.feasible), 'worker')} that could run it "
            f"has attribute {attribute}",
        )
    largest_value, largest = min(groups.items(), key=lambda kv: (-len(kv[1]), kv[0]))
    if len(largest) < size:
        return (
            ReasonCode.GANG,
            f"{needs}; the largest group '{largest_value}' has only {plural(len(largest), 'worker')} "
            "that could run it",
        )
    best_value, best = min(fitting.items(), key=lambda kv: (-kv[1], kv[0]))
    return ReasonCode.GANG, f"{needs}; the best group '{best_value}' has {best} that fit"


def gang_incomplete_reason(size: int, pending: int) -> Reason:
    return ReasonCode.GANG, f"waiting for all {size} tasks of the gang to be pending ({pending} are)"


def gang_mixed_reason() -> Reason:
    return ReasonCode.GANG, "tasks of the gang ask for different resources or constraints; they must match"


def preempting_reason(where: str, victims: list[str], waiting_on: list[str]) -> Reason:
    """``where`` names the worker (or group of workers) being freed; victims are task ids."""
    if victims:
        return (
            ReasonCode.PREEMPTING,
            f"preempting {plural(len(victims), 'lower-priority task')} on {where} ({quote_list(victims)}); "
            "it will place once they exit",
        )
    if waiting_on:
        return (
            ReasonCode.PREEMPTING,
            f"waiting for {plural(len(waiting_on), 'stopping task')} on {where} to exit ({quote_list(waiting_on)})",
        )
    return ReasonCode.PREEMPTING, f"waiting for capacity being freed on {where}"


def queued_reason(ahead: int, limit: int) -> Reason:
    if ahead == 0:
        return ReasonCode.QUEUED, f"next in line; this pass already placed its limit of {limit} tasks"
    return (
        ReasonCode.QUEUED,
        f"queued behind {plural(ahead, 'higher-priority task')}; this pass placed its limit of {limit} tasks",
    )
