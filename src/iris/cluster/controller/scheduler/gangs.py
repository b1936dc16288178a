"""Gang placement: every pending task of a coscheduled job at once, or none of them.

The members go to distinct workers that share one value of the gang's ``group_by`` attribute
(workers lacking the attribute are not candidates), one task per worker. Among the groups in
which enough workers fit a member now, the smallest such group wins (best fit, keeping larger
groups for larger gangs; ties by group value); members in task-index order take the group's
fitting workers in worker order. With preferences (soft constraints), the group whose chosen
workers meet the most preferences wins first, and within a group those workers are taken first.

If no group fits now, the gang may wait on capacity being freed or preempt lower-band work on
enough workers of one group (see ``preemption``); it is not assigned in this pass either way.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .fleet import Fleet, Shape
from .model import Preemption, TaskRequest
from .ordering import BAND_RANK, Gang
from .preemption import Reclaimer
from .reasons import Reason, gang_incomplete_reason, gang_mixed_reason, gang_reason, preempting_reason


@dataclass(slots=True)
class GangOutcome:
    placed: list[tuple[TaskRequest, int]] = field(
        default_factory=list[tuple[TaskRequest, int]]
    )  # (member, worker index)
    cause: Reason | Shape | None = None  # why it waits; a Shape means "the shape's own reason"
    preemptions: list[Preemption] = field(default_factory=list[Preemption])


def place_gang(gang: Gang, fleet: Fleet, reclaimer: Reclaimer | None) -> GangOutcome:
    members = gang.members
    size = len(members)
    if size < gang.size:
        return GangOutcome(cause=gang_incomplete_reason(gang.size, size))
    shape = fleet.shape_for(members[0])
    if any(fleet.shape_for(member) is not shape for member in members[1:]):
        return GangOutcome(cause=gang_mixed_reason())
    if not shape.feasible:
        return GangOutcome(cause=shape)

    attribute = gang.group_by
    groups: dict[str, list[int]] = {}
    for i in shape.feasible:
        value = fleet.attributes[i].get(attribute)
        if value is not None:
            groups.setdefault(str(value), []).append(i)
    need = shape.resources
    fitting = {value: [i for i in workers if fleet.fits(i, need)] for value, workers in groups.items()}
    ready = [(len(fit), value) for value, fit in fitting.items() if len(fit) >= size]
    if ready:
        if shape.preferences:
            value = _preferred_group(fleet, shape, fitting, [v for _, v in ready], size)
        else:
            _, value = min(ready)
        chosen = fitting[value][:size]
        for i in chosen:
            fleet.take(i, need)
        return GangOutcome(placed=list(zip(members, chosen, strict=True)))

    if reclaimer is not None:
        plan = reclaimer.plan_gang(shape, BAND_RANK[gang.head.band], groups, size)
        if plan is not None:
            value, per_worker = plan
            outcome = GangOutcome()
            waiting_on: list[str] = []
            for member, (i, victims) in zip(members, per_worker, strict=True):
                waiting_on.extend(reclaimer.pool_sources.get(i, ()))
                outcome.preemptions.extend(reclaimer.commit(i, victims, need, member.task_id))
            where = f"workers with {attribute}={value}" if size > 1 else fleet.ids[per_worker[0][0]]
            victim_ids = [p.victim_task_id for p in outcome.preemptions]
            outcome.cause = preempting_reason(where, victim_ids, waiting_on)
            return outcome

    counts = {value: len(fit) for value, fit in fitting.items()}
    return GangOutcome(cause=gang_reason(size, attribute, shape, groups, counts))


def _preferred_group(
    fleet: Fleet, shape: Shape, fitting: dict[str, list[int]], ready: list[str], size: int
) -> str:
    """The ready group whose best ``size`` workers meet the most preferences (then best fit)."""
    score = {i: fleet.preference_score(shape, i) for v in ready for i in fitting[v]}
    for v in ready:
        fitting[v].sort(key=lambda i: -score[i])  # stable: worker order among equals
    return min(ready, key=lambda v: (-sum(score[i] for i in fitting[v][:size]), len(fitting[v]), v))
