"""Could this job EVER run here? (pure) A job no registered worker and no scale group could host
is refused at submission with the reason, instead of pending forever.

Only what can never change is checked: a worker's whole capacity (not what is free now), its
attributes against the job's constraints, and, for a gang, whether enough such workers share one
value of the grouping attribute. With no worker registered and no scale group configured nothing
is known yet (workers may still join), so nothing is refused.
"""

from __future__ import annotations

from collections.abc import Sequence

from iris.cluster.config import ScaleGroupConfig
from iris.cluster.controller.autoscaler.routing import group_misfit
from iris.cluster.controller.scheduler.constraints import satisfies, taints_of, tolerated_taints
from iris.cluster.controller.scheduler.model import Resources
from iris.rpc.models import Constraint, JobSpec, ResourceSpec

_SHOWN = 3


def worker_misfit(
    capacity: ResourceSpec, attributes: dict[str, str], request: Resources, constraints: Sequence[Constraint]
) -> str | None:
    """Why one worker could never run one task of the job (None: it could, when idle)."""
    offer = Resources.from_spec(capacity)
    if not request.fits(offer):
        return f"needs {request.describe()} per task, the worker has {offer.describe()}"
    for constraint in constraints:
        if not satisfies(constraint, attributes):
            return f"constraint {constraint.describe()} does not hold"
    untolerated = taints_of(attributes) - tolerated_taints(constraints)
    if untolerated:
        return f"tainted {', '.join(sorted(untolerated))}"
    return None


def _slots(capacity: ResourceSpec, request: Resources) -> int:
    """How many tasks of ``request`` fit on an idle worker at once."""
    offer = Resources.from_spec(capacity)
    counts: list[int] = []
    for need, have in (
        (request.cpu_millicores, offer.cpu_millicores),
        (request.memory_bytes, offer.memory_bytes),
        (request.disk_bytes, offer.disk_bytes),
        (request.device_count, offer.device_count),
    ):
        if need > 0:
            counts.append(have // need)
    return min(counts) if counts else 1_000_000


def workers_misfit(
    workers: Sequence[tuple[str, ResourceSpec, dict[str, str]]],
    resources: ResourceSpec,
    constraints: Sequence[Constraint],
    *,
    replicas: int = 1,
    group_by: str | None = None,
) -> str | None:
    """Why none of ``workers`` (id, capacity, attributes) could ever run the job; None if one could
    or if there are no workers to judge by."""
    if not workers:
        return None
    request = Resources.from_spec(resources)
    reasons: dict[str, list[str]] = {}
    fitting: list[tuple[str, ResourceSpec, dict[str, str]]] = []
    for worker in workers:
        misfit = worker_misfit(worker[1], worker[2], request, constraints)
        if misfit is None:
            fitting.append(worker)
        else:
            reasons.setdefault(misfit, []).append(worker[0])
    if fitting and group_by is None:
        return None
    if fitting and group_by is not None:
        by_value: dict[str, int] = {}
        for _, capacity, attributes in fitting:
            value = attributes.get(group_by)
            if value is not None:
                by_value[value] = by_value.get(value, 0) + _slots(capacity, request)
        best = max(by_value.values(), default=0)
        if best >= replicas:
            return None
        return (
            f"the gang needs {replicas} tasks on workers sharing one {group_by} value;"
            f" the most any value offers is {best}"
        )
    parts: list[str] = []
    for why, ids in sorted(reasons.items(), key=lambda item: -len(item[1])):
        shown = ", ".join(ids[:_SHOWN]) + (f" and {len(ids) - _SHOWN} more" if len(ids) > _SHOWN else "")
        parts.append(f"{shown}: {why}")
    return f"none of the {len(workers)} registered workers fits ({'; '.join(parts)})"


def dry_run_from_groups(spec: JobSpec, groups: Sequence[ScaleGroupConfig]) -> tuple[bool, str]:
    """With no worker running yet: would the autoscaler bring up machines that can run the job?"""
    gang = spec.replicas if spec.coscheduling else 1
    group_by = spec.coscheduling.group_by if spec.coscheduling else None
    reasons: list[str] = []
    for group in groups:
        misfit = group_misfit(group, spec.resources, spec.constraints, gang, group_by)
        if misfit is None:
            return True, (
                f"no workers are running yet: the autoscaler would start scale group {group.name}"
                f" for its {spec.replicas} task(s), which then place there"
            )
        reasons.append(f"{group.name}: {misfit}")
    return False, "no workers are running, and no scale group can ever run this job: " + "; ".join(reasons)
