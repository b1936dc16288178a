"""The order in which one pass tries pending work.

A *unit* is one task, or one gang (all pending tasks of a coscheduled job, tried at once).
Units are ordered by:

1. band: PRODUCTION, then INTERACTIVE, then BATCH;
2. gangs before other work of the same band;
3. deeper job trees first (child jobs of running trees make progress before new roots);
4. fair share across users: each user's queue is sorted by root submission time of the job
   tree, then submission time, then input order; the next unit is always the head of the user
   with the smallest *share*: their recent usage (decayed cpu-seconds, ``fairshare.py``) plus
   a charge of ``TURN_CHARGE_S`` seconds of its cpu for each unit already ordered this pass.
   Equal shares go to the user whose head is oldest. Users who have used less go first; with
   equal usage and equal shapes users alternate, so one user's 10,000 tasks never starve
   another user's single task.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from itertools import accumulate
from operator import itemgetter
from typing import final

from iris.rpc.enums import PriorityBand

from .model import Resources, TaskRequest

BAND_RANK = {band: band.rank for band in PriorityBand}

TURN_CHARGE_S = 60.0  # a unit ordered this pass counts as a minute of its cpu for its user's share
_MIN_TURN_MILLICORES = 100  # so work asking for no cpu still takes turns

_DIGITS = re.compile(r"(\d+)")


def natural_key(text: str) -> tuple[object, ...]:
    """Sort ``job/2`` before ``job/10``."""
    return tuple(int(part) if part.isdigit() else part for part in _DIGITS.split(text))


@final
@dataclass(slots=True, eq=False)
class Gang:
    """The pending tasks of one coscheduled job; placed all together or not at all."""

    members: list[TaskRequest]  # in task-index order
    group_by: str
    size: int  # how many tasks the gang has in total (pending or not)

    @property
    def head(self) -> TaskRequest:
        return self.members[0]


Unit = TaskRequest | Gang


def build_units(pending: Sequence[TaskRequest]) -> list[Unit]:
    """Tasks stay as they are; tasks with ``group_by`` are collected into one Gang per job.

    A gang takes the input position of its first task.
    """
    units: list[Unit] = []
    gangs: dict[str, Gang] = {}
    for task in pending:
        if task.group_by is None:
            units.append(task)
            continue
        gang = gangs.get(task.job_id)
        if gang is None:
            gang = gangs[task.job_id] = Gang([task], task.group_by, task.gang_size)
            units.append(gang)
        else:
            gang.members.append(task)
            gang.size = max(gang.size, task.gang_size)
    for gang in gangs.values():
        gang.members.sort(key=lambda t: natural_key(t.task_id))
    return units


Entry = tuple[float, float, int, float, Unit]  # root submitted, submitted, input order, charge, unit
_CHARGE: Callable[[Entry], float] = itemgetter(3)
Levels = dict[tuple[int, int, int], dict[str, list[Entry]]]  # (band, gang first, depth) -> user -> queue


def order_units(units: Sequence[Unit], recent_usage: Mapping[str, float] | None = None) -> list[Unit]:
    """Units in the order a pass tries them (see the module docstring); ``recent_usage``: each
    user's decayed cpu-seconds (missing: none)."""
    levels: Levels = {}
    rank = BAND_RANK
    per_millicore = TURN_CHARGE_S / 1000
    floor = _MIN_TURN_MILLICORES
    for seq, unit in enumerate(units):
        if type(unit) is Gang:
            head = unit.head
            key = (rank[head.band], 1, -head.depth)
            m = head.resources.cpu_millicores
            charge = (m if m > floor else floor) * per_millicore * len(unit.members)
        else:
            head = unit
            key = (rank[unit.band], 2, -unit.depth)
            m = unit.resources.cpu_millicores
            charge = (m if m > floor else floor) * per_millicore
        level = levels.get(key)
        if level is None:
            level = levels[key] = {}
        queue = level.get(head.user)
        if queue is None:
            queue = level[head.user] = []
        queue.append((head.root_submitted_at, head.submitted_at, seq, charge, unit))
    return _merge_levels(levels, recent_usage)


def order_pending(
    pending: Sequence[TaskRequest], recent_usage: Mapping[str, float] | None = None
) -> list[Unit]:
    """``order_units(build_units(pending), recent_usage)`` in one walk over the tasks (the pass's
    first stage): the same order, the input position of a task (of a gang: of its first task)
    breaking ties as a unit's would."""
    levels: Levels = {}
    rank = BAND_RANK
    per_millicore = TURN_CHARGE_S / 1000
    floor = _MIN_TURN_MILLICORES
    gangs: dict[str, tuple[int, Gang]] = {}
    # Tasks of one job come in runs sharing band, depth, user and resources: the level's queue
    # and the turn charge are looked up again only when one of them changes.
    last_band: PriorityBand | None = None
    last_depth = 0
    last_user = ""
    queue: list[Entry] = []
    last_resources: Resources | None = None
    charge = 0.0
    for seq, task in enumerate(pending):
        if task.group_by is not None:
            found = gangs.get(task.job_id)
            if found is None:
                gangs[task.job_id] = (seq, Gang([task], task.group_by, task.gang_size))
            else:
                found[1].members.append(task)
                found[1].size = max(found[1].size, task.gang_size)
            continue
        band, depth, user = task.band, task.depth, task.user
        if band is not last_band or depth != last_depth or user != last_user:
            key = (rank[band], 2, -depth)
            level = levels.get(key)
            if level is None:
                level = levels[key] = {}
            found_queue = level.get(user)
            if found_queue is None:
                found_queue = level[user] = []
            queue = found_queue
            last_band, last_depth, last_user = band, depth, user
        resources = task.resources
        if resources is not last_resources:
            m = resources.cpu_millicores
            charge = (m if m > floor else floor) * per_millicore
            last_resources = resources
        queue.append((task.root_submitted_at, task.submitted_at, seq, charge, task))
    for seq, gang in gangs.values():
        gang.members.sort(key=lambda t: natural_key(t.task_id))
        head = gang.head
        m = head.resources.cpu_millicores
        charge = (m if m > floor else floor) * per_millicore * len(gang.members)
        level = levels.setdefault((rank[head.band], 1, -head.depth), {})
        level.setdefault(head.user, []).append((head.root_submitted_at, head.submitted_at, seq, charge, gang))
    return _merge_levels(levels, recent_usage)


def _merge_levels(levels: Levels, recent_usage: Mapping[str, float] | None) -> list[Unit]:
    ordered: list[Unit] = []
    for key in sorted(levels):
        queues = list(levels[key].values())
        for queue in queues:
            queue.sort()  # input order (seq) is unique, so units themselves are never compared
        if len(queues) == 1:
            ordered.extend(entry[4] for entry in queues[0])
            continue
        ordered.extend(_fair_share(levels[key], recent_usage or {}))
    return ordered


def _fair_share(queues: Mapping[str, list[Entry]], recent_usage: Mapping[str, float]) -> list[Unit]:
    """Merge users' queues: the next unit is the head of the user with the smallest share.

    Each user's shares only grow along their queue, so merging by smallest share is one sort of
    every unit by (its user's share when it comes up, its own order key)."""
    keyed: list[tuple[float, Entry]] = []
    for user, queue in queues.items():
        # the share before each unit (one more than the queue: zip stops at the queue's end)
        shares = accumulate(map(_CHARGE, queue), initial=recent_usage.get(user, 0.0))
        keyed.extend(zip(shares, queue, strict=False))
    keyed.sort()  # ties go to the entries, whose input order (seq) is unique: units never compared
    return [entry[1][4] for entry in keyed]
