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
from itertools import accumulate, repeat
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


Run = tuple[float, float, int, float, str, list[Unit]]
# a run: root submitted, submitted, input position of its first unit, turn charge, user, its units
_SHARE: Callable[[tuple[Unit, float]], float] = itemgetter(1)


def order_pending(
    pending: Sequence[TaskRequest], recent_usage: Mapping[str, float] | None = None
) -> list[Unit]:
    """``order_units(build_units(pending), recent_usage)`` in one walk over the tasks (the pass's
    first stage): the same order, the input position of a task (of a gang: of its first task)
    breaking ties as a unit's would.

    Consecutive tasks alike in band, depth, user, resources and submission times (one job's
    tasks, as the controller lists them) are kept as one *run*: no other task of their level
    sorts between them (their input positions are consecutive), so a level is sorted by run.
    Fair share then walks the level's runs in that order, which is each user's queue order, so
    every unit's share comes out as ``_fair_share`` sums it, and the units are already in the
    order that breaks equal shares: one stable sort by share alone merges the users."""
    levels: dict[tuple[int, int, int], list[Run]] = {}
    rank = BAND_RANK
    per_millicore = TURN_CHARGE_S / 1000
    floor = _MIN_TURN_MILLICORES
    gangs: dict[str, tuple[int, Gang]] = {}
    last_band: PriorityBand | None = None
    last_depth = 0
    last_user = ""
    last_resources: Resources | None = None
    last_root = last_submitted = 0.0
    run: list[Unit] = []
    for seq, task in enumerate(pending):
        if task.group_by is not None:
            found = gangs.get(task.job_id)
            if found is None:
                gangs[task.job_id] = (seq, Gang([task], task.group_by, task.gang_size))
            else:
                found[1].members.append(task)
                found[1].size = max(found[1].size, task.gang_size)
            last_band = None  # the next task starts a run: input positions must stay consecutive
            continue
        band, depth, user, resources = task.band, task.depth, task.user, task.resources
        root, submitted = task.root_submitted_at, task.submitted_at
        if (
            band is last_band
            and resources is last_resources
            and root == last_root
            and submitted == last_submitted
            and depth == last_depth
            and user == last_user
        ):
            run.append(task)
            continue
        key = (rank[band], 2, -depth)
        level = levels.get(key)
        if level is None:
            level = levels[key] = []
        m = resources.cpu_millicores
        run = [task]
        level.append((root, submitted, seq, (m if m > floor else floor) * per_millicore, user, run))
        last_band, last_depth, last_user, last_resources = band, depth, user, resources
        last_root, last_submitted = root, submitted
    for seq, gang in gangs.values():
        gang.members.sort(key=lambda t: natural_key(t.task_id))
        head = gang.head
        m = head.resources.cpu_millicores
        charge = (m if m > floor else floor) * per_millicore * len(gang.members)
        levels.setdefault((rank[head.band], 1, -head.depth), []).append(
            (head.root_submitted_at, head.submitted_at, seq, charge, head.user, [gang])
        )
    ordered: list[Unit] = []
    usage = recent_usage or {}
    for key in sorted(levels):
        runs = levels[key]
        runs.sort()  # first input positions are unique, so nothing after them is ever compared
        if len({r[4] for r in runs}) == 1:
            for r in runs:
                ordered.extend(r[5])
            continue
        ordered.extend(_fair_share_runs(runs, usage))
    return ordered


def _fair_share_runs(runs: Sequence[Run], recent_usage: Mapping[str, float]) -> list[Unit]:
    """``_fair_share`` over a level's runs, sorted: each unit with its user's share when it comes
    up (summed in the user's queue order, as ``_fair_share`` does), then a stable sort by share."""
    shares: dict[str, float] = {}
    keyed: list[tuple[Unit, float]] = []
    extend = keyed.extend
    for _, _, _, charge, user, units in runs:
        share = shares.get(user)
        if share is None:
            share = recent_usage.get(user, 0.0)
        if len(units) == 1:
            keyed.append((units[0], share))
            shares[user] = share + charge
            continue
        # the share before each unit; zip stops at the run's end without taking the next share
        following = accumulate(repeat(charge, len(units)), initial=share)
        extend(zip(units, following, strict=False))
        shares[user] = next(following)
    keyed.sort(key=_SHARE)  # stable: equal shares keep (root submitted, submitted, input order)
    return [k[0] for k in keyed]


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
