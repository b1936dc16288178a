"""One scheduling pass: pending tasks, workers and running tasks in; decisions out. No I/O.

A pass runs five named stages (in the style of Kueue's ``schedule()``), each a function here or
in the module named, each timed (``SchedulingResult.stage_seconds``, exported by the controller
as ``iris_scheduler_stage_seconds{stage=...}``):

1. ``order`` (``ordering``): pending work as units (tasks, gangs) in the order they are tried;
2. ``gate`` (``gates``): may this unit be tried at all (per-user budgets)? A held unit waits;
3. ``place`` (``place_task``; ``gangs.place_gang`` for gangs): a feasible worker of the task's
   shape (``fleet``); a task that does not fit does not block the ones behind it;
4. ``reclaim`` (``reclaim``; ``preemption``): a task that cannot be placed may wait for capacity
   already being freed or preempt strictly lower-band work, which promises it that capacity for
   the rest of the pass (a gang's reclaim runs inside ``place_gang`` and counts as ``place``);
5. ``explain`` (``explain_pending``; ``reasons``): a ``PendingReason`` for every task left
   unassigned, computed once per shape or gang.

Gate, place and reclaim run per unit, interleaved in order, so what a unit is given is seen by
the units after it; their times are summed over the pass.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from time import perf_counter
from typing import final

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
from .ordering import BAND_RANK, Gang, Unit, order_pending
from .preemption import Reclaimer
from .reasons import Reason, preempting_reason, queued_reason, shape_reason


@final
class _Queued:
    """Cause: the pass reached max_assignments before trying this task."""


_QUEUED = _Queued()

Cause = Shape | Reason | _Queued
STAGES = ("order", "gate", "place", "reclaim", "explain")


def order(pending: Sequence[TaskRequest], recent_usage: Mapping[str, float] | None = None) -> list[Unit]:
    """Stage 1: pending tasks as units (gangs whole) in the order the pass tries them."""
    return order_pending(pending, recent_usage)


def place_task(task: TaskRequest, fleet: Fleet) -> tuple[int, Shape]:
    """Stage 3 for one task: the index of the worker it takes (taken in ``fleet``), or -1, and
    its shape (what the other stages need to know about where it could go)."""
    shape = fleet.shape_for(task)
    if shape.exhausted:
        return -1, shape
    return fleet.pick(shape), shape


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
    started = perf_counter()
    fleet = Fleet(workers)
    reclaimer = None
    if running and (allow_preemption or any(t.stopping for t in running)):
        reclaimer = Reclaimer(fleet, running, allow_preemption)
    ordered = order(pending, recent_usage)
    ordered_at = perf_counter()
    budgets = budgets or {}
    held = held_by_user(running, None if EVERYONE in budgets else budgets) if budgets else {}
    limit = len(pending) if max_assignments is None else max(0, max_assignments)

    assignments: list[tuple[str, str]] = []
    preemptions: list[Preemption] = []
    waiting: list[tuple[TaskRequest, Cause]] = []
    ids = fleet.ids
    shape_for, pick = fleet.shape_for, fleet.pick
    gate_s = reclaim_s = 0.0
    rank = BAND_RANK
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
                t = perf_counter()
                held_back = gate(head.user, head.resources, len(unit.members), budgets, held)
                gate_s += perf_counter() - t
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
            t = perf_counter()
            held_back = gate(task.user, task.resources, 1, budgets, held)
            gate_s += perf_counter() - t
            if held_back is not None:
                waiting.append((task, held_back))
                continue
        shape = shape_for(task)  # place_task, inlined: this loop runs once per pending task
        i = -1 if shape.exhausted else pick(shape)
        if i >= 0:
            assignments.append((task.task_id, ids[i]))
            if budgets:
                charge(held, task.user, task.resources, 1)
            continue
        # a band for which this shape has nothing to reclaim skips the stage (and its timing):
        # once nothing fits, this is most tasks of the pass
        if reclaimer is not None and shape.feasible and rank[task.band] not in shape.no_plan_ranks:
            t = perf_counter()
            cause = reclaim(task, shape, reclaimer, preemptions)
            reclaim_s += perf_counter() - t
            if cause is not None:
                waiting.append((task, cause))
                continue
        waiting.append((task, shape))
    for unit in ordered[stop:]:
        if type(unit) is Gang:
            waiting.extend((member, _QUEUED) for member in unit.members)
        else:
            waiting.append((unit, _QUEUED))
    placed_at = perf_counter()
    reasons = explain_pending(fleet, waiting, limit)
    stage_seconds = {
        "order": ordered_at - started,
        "gate": gate_s,
        "place": max(0.0, placed_at - ordered_at - gate_s - reclaim_s),
        "reclaim": reclaim_s,
        "explain": perf_counter() - placed_at,
    }
    return SchedulingResult(assignments, preemptions, reasons, stage_seconds)


def reclaim(
    task: TaskRequest, shape: Shape, reclaimer: Reclaimer, preemptions: list[Preemption]
) -> Reason | None:
    """Stage 4 for a task that did not place: wait for capacity already being freed, or preempt
    strictly lower-band work (appended to ``preemptions``); the reason it waits, or None when
    nothing can be reclaimed for it."""
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


def explain_pending(
    fleet: Fleet, waiting: list[tuple[TaskRequest, Cause]], limit: int
) -> dict[str, PendingReason]:
    """Stage 5: a reason (and place in its band's line) for every task left waiting, in order."""
    reasons: dict[str, PendingReason] = {}
    by_shape: dict[int, Reason] = {}
    positions = [0] * len(BAND_RANK)
    rank = BAND_RANK
    for ahead, (task, cause) in enumerate(waiting):
        band = rank[task.band]
        positions[band] += 1
        if type(cause) is Shape:  # the common cause first (once nothing fits: every task's)
            found = by_shape.get(id(cause))
            if found is None:
                found = by_shape[id(cause)] = shape_reason(fleet, cause)
            code, message = found
        elif type(cause) is _Queued:
            code, message = queued_reason(ahead, limit)
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
