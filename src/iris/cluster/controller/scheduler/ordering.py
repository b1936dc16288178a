"""The order in which one pass tries pending work.

A *unit* is one task, or one gang (all pending tasks of a coscheduled job, tried at once).
Units are ordered by:

1. band: PRODUCTION, then INTERACTIVE, then BATCH;
2. gangs before other work of the same band;
3. deeper job trees first (child jobs of running trees make progress before new roots);
4. round-robin across users: each user's queue is sorted by root submission time of the job
   tree, then submission time, then input order; users take turns, the user whose head is
   oldest going first. So one user's 10,000 tasks never starve another user's single task:
   that task is at most the second in its (band, depth) level.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import zip_longest

from iris.rpc.enums import PriorityBand

from .model import TaskRequest

BAND_RANK = {band: band.rank for band in PriorityBand}

_DIGITS = re.compile(r"(\d+)")


def natural_key(text: str) -> tuple[object, ...]:
    """Sort ``job/2`` before ``job/10``."""
    return tuple(int(part) if part.isdigit() else part for part in _DIGITS.split(text))


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


def order_units(units: Sequence[Unit]) -> list[Unit]:
    """Units in the order a pass tries them (see the module docstring)."""
    levels: dict[tuple[int, int, int], dict[str, list[tuple[float, float, int, Unit]]]] = {}
    rank = BAND_RANK
    for seq, unit in enumerate(units):
        if type(unit) is Gang:
            head, solo = unit.head, 1
        else:
            head, solo = unit, 2
        level = levels.get((rank[head.band], solo, -head.depth))
        if level is None:
            level = levels[(rank[head.band], solo, -head.depth)] = {}
        queue = level.get(head.user)
        if queue is None:
            queue = level[head.user] = []
        queue.append((head.root_submitted_at, head.submitted_at, seq, unit))
    ordered: list[Unit] = []
    for key in sorted(levels):
        queues = list(levels[key].values())
        for queue in queues:
            queue.sort()  # input order (seq) is unique, so units themselves are never compared
        if len(queues) == 1:
            ordered.extend(entry[3] for entry in queues[0])
            continue
        queues.sort(key=lambda q: q[0][:3])
        for turn in zip_longest(*queues):
            ordered.extend(entry[3] for entry in turn if entry is not None)
    return ordered
