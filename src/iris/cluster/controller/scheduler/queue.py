"""Which pending tasks a scheduling pass looks at, so a round's work grows with what changed.

A task that a pass could not place is *parked*: later passes skip it until something suggests it
could place now. Three things do:

- a schedulable worker's free room grows (a task ended, a worker registered or came back) into
  room for a parked task's shape: then every pending task is considered again, in priority
  order (a *full* pass);
- its backoff expires: parked tasks are looked at again after ``backoff_min_s``, doubling up to
  ``backoff_max_s`` while full passes keep placing nothing (a safety net for what the fleet
  check cannot see, such as a constraint that a re-registered worker now satisfies);
- ``invalidate()``: the shell knows the world changed in a way the check cannot see.

New work (a submitted job, a task back to PENDING for a retry) is *dirty*: the next pass looks
at just the dirty tasks, against the whole fleet. A new task that fits takes free capacity that
no parked task could use (else the pass would have been full), so skipping parked tasks never
lets lower-priority work take a slot that waiting higher-priority work could have had.

Pure bookkeeping: no clock, database or network; ``now`` and fleet views are arguments.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from .model import Resources, TaskRequest, WorkerView

FULL_PASS_SHARE = 0.05  # at most this share of the loop's time goes to full passes that place nothing


@dataclass(frozen=True)
class PassScope:
    """``full``: every pending task, in priority order. Otherwise only these jobs' and tasks'."""

    full: bool
    jobs: frozenset[str] = frozenset()
    tasks: frozenset[str] = frozenset()

    @property
    def empty(self) -> bool:
        return not self.full and not self.jobs and not self.tasks


@dataclass
class PendingQueue:
    backoff_min_s: float = 2.0
    backoff_max_s: float = 30.0
    parked: dict[str, TaskRequest] = field(default_factory=dict[str, TaskRequest])
    dirty_jobs: set[str] = field(default_factory=set[str])
    dirty_tasks: set[str] = field(default_factory=set[str])
    backoff_s: float = 0.0
    full_due_at: float = 0.0  # 0: a full pass is due now (nothing is known yet)
    _shapes: Counter[Resources] = field(default_factory=Counter[Resources])  # parked tasks by resource shape
    _free: dict[str, Resources] = field(
        default_factory=dict[str, Resources]
    )  # each worker's free room, last round
    _left_during_pass: set[str] = field(default_factory=set[str])  # left PENDING since the last scope

    # ---- signals from the shell

    def job_submitted(self, job_id: str) -> None:
        self.dirty_jobs.add(job_id)

    def task_pending_again(self, task_id: str) -> None:
        self.dirty_tasks.add(task_id)
        self._unpark(task_id)

    def forget(self, task_ids: Iterable[str]) -> None:
        """Tasks that left PENDING (killed, placed elsewhere): no longer parked."""
        for task_id in task_ids:
            self._unpark(task_id)
            self._left_during_pass.add(task_id)  # a pass that read it before it left: not parked

    def invalidate(self) -> None:
        self.full_due_at = 0.0

    # ---- decisions

    def idle(self, now: float) -> bool:
        """Nothing parked, nothing new and no full pass due: a pass now would consider nothing."""
        return not self.parked and not self.dirty_jobs and not self.dirty_tasks and now < self.full_due_at

    def scope(self, views: Sequence[WorkerView], now: float) -> PassScope:
        """What the next pass must consider, given the fleet as it is now.

        The scope names the new work known now (also when full): ``passed`` clears only that,
        so work that arrives while the pass runs is looked at by the next one.
        """
        grown = self._room_grew_for_parked(views)  # always: it also records the fleet's free room
        self._left_during_pass = set()
        full = grown or now >= self.full_due_at
        return PassScope(full=full, jobs=frozenset(self.dirty_jobs), tasks=frozenset(self.dirty_tasks))

    def passed(
        self,
        scope: PassScope,
        considered: Sequence[TaskRequest],
        placed: Iterable[str],
        now: float,
        *,
        took_s: float = 0.0,
    ) -> None:
        """Record a pass over ``considered`` (the scope's pending tasks) that placed ``placed``.

        ``considered`` may leave out the placed ones (they are never parked either way).
        ``took_s``: what the pass cost; a full pass that placed nothing comes back no sooner than
        ``FULL_PASS_SHARE`` of the time allows (a huge backlog must not keep the loop busy).
        """
        placed_ids = set(placed)
        gone = placed_ids | self._left_during_pass
        if scope.full:
            self.parked = {r.task_id: r for r in considered if r.task_id not in gone}
            self._shapes = _shape_counts(self.parked.values())
            # Backoff grows only while full passes achieve nothing.
            self.backoff_s = (
                self.backoff_min_s
                if placed_ids
                else min(self.backoff_max_s, max(self.backoff_min_s, self.backoff_s * 2))
            )
            self.full_due_at = now + max(self.backoff_s, 0.0 if placed_ids else took_s / FULL_PASS_SHARE)
        else:
            for r in considered:
                self._unpark(r.task_id)
                if r.task_id not in gone:
                    self.parked[r.task_id] = r
                    self._shapes[r.resources] += 1
            for task_id in placed_ids:
                self._unpark(task_id)
        self.dirty_jobs -= scope.jobs
        self.dirty_tasks -= scope.tasks

    def unplaced(self) -> list[TaskRequest]:
        """Every parked task: the autoscaler's demand."""
        return list(self.parked.values())

    def _unpark(self, task_id: str) -> None:
        request = self.parked.pop(task_id, None)
        if request is not None:
            left = self._shapes[request.resources] - 1
            if left > 0:
                self._shapes[request.resources] = left
            else:
                del self._shapes[request.resources]

    def _room_grew_for_parked(self, views: Sequence[WorkerView]) -> bool:
        """Whether some worker's free room grew since the last round into room for a parked shape.

        Every parked task failed to fit every worker's free room as it was then (or that room
        fits none of the parked shapes); only room that grew can change that, so a worker
        whose free room stayed or shrank is never a reason to look at parked tasks again.
        """
        shapes = list(self._shapes)
        grown = False
        free_now: dict[str, Resources] = {}
        for w in views:
            free = w.capacity - w.used if w.schedulable else _NOTHING
            free_now[w.worker_id] = free
            before = self._free.get(w.worker_id)
            if grown or not shapes or (before is not None and not _grew(free, before)):
                continue
            grown = any(shape.fits(free) for shape in shapes)
        self._free = free_now
        return grown


_NOTHING = Resources(0, 0, 0)


def _shape_counts(requests: Iterable[TaskRequest]) -> Counter[Resources]:
    """Parked tasks by shape. A job's tasks share one shape, so count by job id (a cached string
    hash) and hash each shape once: a full pass can park 100,000 tasks."""
    per_job: dict[str, int] = {}
    shape_of: dict[str, Resources] = {}
    for r in requests:
        n = per_job.get(r.job_id)
        if n is None:
            per_job[r.job_id] = 1
            shape_of[r.job_id] = r.resources
        elif (shape := shape_of[r.job_id]) is r.resources or shape == r.resources:
            per_job[r.job_id] = n + 1
        else:  # never expected: then count it apart, exactly
            shape_of[r.task_id] = r.resources
            per_job[r.task_id] = 1
    counts: Counter[Resources] = Counter()
    for key, n in per_job.items():
        counts[shape_of[key]] += n
    return counts


def _grew(now: Resources, before: Resources) -> bool:
    return (
        now.cpu_millicores > before.cpu_millicores
        or now.memory_bytes > before.memory_bytes
        or now.disk_bytes > before.disk_bytes
        or now.device_count > before.device_count
    )
