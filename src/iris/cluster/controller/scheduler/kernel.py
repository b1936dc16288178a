"""One scheduling pass: pending tasks, workers and running tasks in; decisions out. No I/O.

The pass walks pending work once in priority order (``ordering``). Each task is placed on a
feasible worker of its shape (``fleet``); a task that does not fit does not block the ones
behind it. A task that cannot be placed may wait for capacity already being freed or preempt
strictly lower-band work (``preemption``), which promises it that capacity for the rest of the
pass. Every task left unassigned gets a ``PendingReason``, computed once per shape or gang.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from .fleet import Fleet, Shape
from .gangs import place_gang
from .gates import EVERYONE, Budget, Held, gate, held_by_user
from .model import (
    PendingReason,
    Preemption,
    Resources,
    RunningTask,
    SchedulingResult,
    TaskRequest,
    WorkerView,
)
from .ordering import BAND_RANK, Gang, build_units, order_units
from .preemption import Reclaimer
from .reasons import Reason, preempting_reason, queued_reason, shape_reason

_QUEUED = object()  # cause: the pass reached max_assignments before trying this task

Cause = Shape | Reason | object


def schedule(
    pending: Sequence[TaskRequest],
    workers: Sequence[WorkerView],
    running: Sequence[RunningTask] = (),
    *,
    allow_preemption: bool = True,
    max_assignments: int | None = None,
    budgets: Mapping[str, Budget] | None = None,
    recent_usage: Mapping[str, float] | None = None,
) -> SchedulingResult:
    """Decide where pending tasks run now, what to preempt, and why the rest wait.

    ``workers[i].used`` must already include the resources of ``running`` tasks on it.
    ``max_assignments`` caps placements in this pass; a gang that does not fit in what is left
    of the cap waits (code "queued"), unless nothing has been placed yet in the pass, so a gang
    larger than the cap is still placed, alone.
    ``budgets`` (user -> Budget, ``"*"`` for everyone else): the gates (gates.py) hold a unit
    whose user is at the budget. ``recent_usage`` (user -> decayed cpu-seconds): fair share
    among users of one band (ordering.py).
    """
    fleet = Fleet(workers)
    reclaimer = None
    if running and (allow_preemption or any(t.stopping for t in running)):
        reclaimer = Reclaimer(fleet, running, allow_preemption)
    ordered = order_units(build_units(pending), recent_usage)
    budgets = budgets or {}
    held = held_by_user(running, None if EVERYONE in budgets else budgets) if budgets else {}
    limit = len(pending) if max_assignments is None else max(0, max_assignments)

    assignments: list[tuple[str, str]] = []
    preemptions: list[Preemption] = []
    waiting: list[tuple[TaskRequest, Cause]] = []
    ids = fleet.ids
    shape_for = fleet.shape_for
    pick = fleet.pick
    stop = len(ordered)
    for n, unit in enumerate(ordered):
        if len(assignments) >= limit:
            stop = n
            break
        if type(unit) is Gang:
            if assignments and len(unit.members) > limit - len(assignments):
                waiting.extend((member, _QUEUED) for member in unit.members)
                continue
            head = unit.head
            if budgets:
                held_back = gate(head.user, head.resources, len(unit.members), budgets, held)
                if held_back is not None:
                    waiting.extend((member, held_back) for member in unit.members)
                    continue
            outcome = place_gang(unit, fleet, reclaimer)
            assignments.extend((member.task_id, ids[i]) for member, i in outcome.placed)
            preemptions.extend(outcome.preemptions)
            if outcome.cause is not None:
                waiting.extend((member, outcome.cause) for member in unit.members)
            elif budgets:
                charge(held, head.user, head.resources, len(outcome.placed))
            continue
        task = unit
        if budgets:
            held_back = gate(task.user, task.resources, 1, budgets, held)
            if held_back is not None:
                waiting.append((task, held_back))
                continue
        shape = shape_for(task)
        if not shape.exhausted:
            i = pick(shape)
            if i >= 0:
                assignments.append((task.task_id, ids[i]))
                if budgets:
                    charge(held, task.user, task.resources, 1)
                continue
        if reclaimer is not None and shape.feasible:
            cause = _free_capacity_for(task, shape, reclaimer, preemptions)
            if cause is not None:
                waiting.append((task, cause))
                continue
        waiting.append((task, shape))
    for unit in ordered[stop:]:
        if type(unit) is Gang:
            waiting.extend((member, _QUEUED) for member in unit.members)
        else:
            waiting.append((unit, _QUEUED))
    return SchedulingResult(assignments, preemptions, _pending_reasons(fleet, waiting, limit))


def _free_capacity_for(
    task: TaskRequest, shape: Shape, reclaimer: Reclaimer, preemptions: list[Preemption]
) -> Reason | None:
    rank = BAND_RANK[task.band]
    if rank in shape.no_plan_ranks:
        return None
    plan = reclaimer.plan(shape, rank)
    if plan is None:
        shape.no_plan_ranks.add(rank)
        return None
    i, victims = plan
    waiting_on = list(reclaimer.pool_sources.get(i, ()))
    made = reclaimer.commit(i, victims, shape.resources, task.task_id)
    preemptions.extend(made)
    return preempting_reason(reclaimer.fleet.ids[i], [p.victim_task_id for p in made], waiting_on)


def _pending_reasons(
    fleet: Fleet, waiting: list[tuple[TaskRequest, Cause]], limit: int
) -> dict[str, PendingReason]:
    reasons: dict[str, PendingReason] = {}
    by_shape: dict[int, Reason] = {}
    positions = [0] * len(BAND_RANK)
    rank = BAND_RANK
    for ahead, (task, cause) in enumerate(waiting):
        band = rank[task.band]
        positions[band] += 1
        if cause is _QUEUED:
            code, message = queued_reason(ahead, limit)
        elif type(cause) is Shape:
            found = by_shape.get(id(cause))
            if found is None:
                found = by_shape[id(cause)] = shape_reason(fleet, cause)
            code, message = found
        else:
            code, message = cause
        reasons[task.task_id] = PendingReason(code, message, positions[band])
    return reasons


def charge(held: dict[str, Held], user: str, resources: Resources, count: int) -> None:
    """What a placement gives ``user``, for the gates of the rest of the pass."""
    h = held.get(user)
    if h is None:
        h = held[user] = Held()
    h.add(resources, count)
