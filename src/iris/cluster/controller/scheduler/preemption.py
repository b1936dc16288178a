"""Freeing capacity for pending work that does not fit: waiting on stopping tasks, or preempting.

Per worker the reclaimer knows the *pool* (capacity already on its way out: tasks the
controller is stopping, and victims chosen earlier in this pass, minus what earlier preemptors
were promised) and the *victims* (running tasks that could be preempted, cheapest first: lowest
band first, then the youngest).

A plan for a task on one worker says which victims must go so that free + pool + victims fits
it. An empty plan means the task only waits for the pool. Victims are strictly lower-band than
the preemptor. A task that is not part of a gang never preempts a member of a running gang
(that would tear down the whole gang); a gang may, provided every running member of the victim
gang is of a strictly lower band, and then all of them are preempted.

Committing a plan promises the worker's capacity to the preemptor for the rest of the pass: the
part it will use that is free now is taken out of the free vector (so lower-priority work in
the same pass cannot grab it) and the rest out of the pool. The preemptor itself is not
assigned in this pass; it places in a later pass once its victims are gone. The controller
should then pass those victims with ``stopping=True`` so they are not chosen again.
"""

from __future__ import annotations

from collections.abc import Sequence
from heapq import heapify, heappop, heapreplace

from .fleet import Fleet, Shape
from .model import Preemption, Resources, RunningTask
from .ordering import BAND_RANK

# (importance of the most important victim, negated; number of victims; oldest start, negated)
Cost = tuple[int, int, float]
_WAIT_ONLY: Cost = (-len(BAND_RANK), 0, 0.0)


def _vector(r: Resources) -> list[int]:
    return [r.cpu_millicores, r.memory_bytes, r.disk_bytes, r.device_count]


def _victim_order(task: RunningTask) -> tuple[int, float]:
    return -BAND_RANK[task.band], -task.started_at


class Reclaimer:
    def __init__(self, fleet: Fleet, running: Sequence[RunningTask], allow_preemption: bool) -> None:
        self.fleet = fleet
        self.allow_preemption = allow_preemption
        self.pool: dict[int, list[int]] = {}
        self.pool_sources: dict[int, list[str]] = {}  # task ids whose exit fills the pool
        self.victims: dict[int, list[RunningTask]] = {}
        self.gangs: dict[str, list[RunningTask]] = {}  # running, not stopping, members by job
        self.gang_top_rank: dict[str, int] = {}  # rank of the most important running member
        self.taken: set[str] = set()
        self._plans: dict[tuple[int, int], list[tuple[Cost, int]]] = {}
        self._lower: dict[int, set[int]] = {}  # by band rank: workers with a lower-band victim
        for task in running:
            i = fleet.index.get(task.worker_id)
            if i is None:
                continue
            if task.stopping:
                self._release(i, task)
                continue
            self.victims.setdefault(i, []).append(task)
            if task.group_by is not None:
                self.gangs.setdefault(task.job_id, []).append(task)
                rank = BAND_RANK[task.band]
                self.gang_top_rank[task.job_id] = min(rank, self.gang_top_rank.get(task.job_id, rank))
        for tasks in self.victims.values():
            tasks.sort(key=_victim_order)

    def candidates(self, rank: int) -> set[int]:
        """Workers where a task of band ``rank`` might get room: a pool, or a lower-band victim."""
        lower = self._lower.get(rank)
        if lower is None:
            lower = self._lower[rank] = {
                i for i, tasks in self.victims.items() if BAND_RANK[tasks[0].band] > rank
            }
        return lower | self.pool.keys()

    def _release(self, i: int, task: RunningTask) -> None:
        pool = self.pool.setdefault(i, [0, 0, 0, 0])
        for d, amount in enumerate(_vector(task.resources)):
            pool[d] += amount
        self.pool_sources.setdefault(i, []).append(task.task_id)

    # ------------------------------------------------------------------ planning

    def plan_on(
        self, i: int, need: Resources, rank: int, gang: bool
    ) -> tuple[Cost, list[RunningTask]] | None:
        """The cheapest victims on worker ``i`` that make ``need`` fit, or None if impossible."""
        fleet = self.fleet
        pool = self.pool.get(i) or (0, 0, 0, 0)
        deficit = [
            need.cpu_millicores - fleet.free_cpu[i] - pool[0],
            need.memory_bytes - fleet.free_mem[i] - pool[1],
            need.disk_bytes - fleet.free_disk[i] - pool[2],
            need.device_count - fleet.free_dev[i] - pool[3],
        ]
        if max(deficit) <= 0:
            return _WAIT_ONLY, []
        if not self.allow_preemption:
            return None
        chosen: list[RunningTask] = []
        for victim in self.victims.get(i, ()):
            victim_rank = BAND_RANK[victim.band]
            if victim_rank <= rank:
                break  # sorted lowest band first: nothing after this is preemptible
            if victim.task_id in self.taken:
                continue
            if victim.group_by is not None and (not gang or self.gang_top_rank[victim.job_id] <= rank):
                continue
            chosen.append(victim)
            r = victim.resources
            deficit[0] -= r.cpu_millicores
            deficit[1] -= r.memory_bytes
            deficit[2] -= r.disk_bytes
            deficit[3] -= r.device_count
            if max(deficit) <= 0:
                break
        if max(deficit) > 0:
            return None
        # Keep cheap victims, drop dearer ones the rest make unnecessary (the last one is needed).
        for victim in reversed(chosen[:-1]):
            freed = _vector(victim.resources)
            if all(d + f <= 0 for d, f in zip(deficit, freed, strict=True)):
                chosen.remove(victim)
                deficit = [d + f for d, f in zip(deficit, freed, strict=True)]
        cost = (
            -min(BAND_RANK[v.band] for v in chosen),
            len(chosen),
            -min(v.started_at for v in chosen),
        )
        return cost, chosen

    def plan(self, shape: Shape, rank: int) -> tuple[int, list[RunningTask]] | None:
        """Best worker and victims for one more task of ``shape`` at band ``rank``.

        Plans for a (shape, band) are computed once and kept in a heap; since commits only make
        plans dearer, a popped plan is recomputed and re-queued if it got worse.
        """
        key = (id(shape), rank)
        heap = self._plans.get(key)
        if heap is None:
            if shape.feasible_set is None:
                shape.feasible_set = frozenset(shape.feasible)
            heap = list[tuple[Cost, int]]()
            for i in self.candidates(rank) & shape.feasible_set:
                found = self.plan_on(i, shape.resources, rank, gang=False)
                if found is not None:
                    heap.append((found[0], i))
            heapify(heap)
            self._plans[key] = heap
        while heap:
            cost, i = heap[0]
            found = self.plan_on(i, shape.resources, rank, gang=False)
            if found is None:
                heappop(heap)
            elif found[0] > cost:
                heapreplace(heap, (found[0], i))
            else:
                return i, found[1]
        return None

    def plan_gang(
        self, shape: Shape, rank: int, groups: dict[str, list[int]], size: int
    ) -> tuple[str, list[tuple[int, list[RunningTask]]]] | None:
        """The group and, per chosen worker, the victims that make room for a whole gang."""
        best: tuple[tuple[Cost, int, str], list[tuple[int, list[RunningTask]]]] | None = None
        for value, members in groups.items():
            if len(members) < size:
                continue
            plans: list[tuple[Cost, int, list[RunningTask]]] = []
            for i in members:
                found = self.plan_on(i, shape.resources, rank, gang=True)
                if found is not None:
                    plans.append((found[0], i, found[1]))
            if len(plans) < size:
                continue
            plans.sort(key=lambda p: (p[0], p[1]))
            chosen = plans[:size]
            cost = (max(p[0] for p in chosen), sum(len(p[2]) for p in chosen), value)
            if best is None or cost < best[0]:
                best = (cost, [(i, victims) for _, i, victims in chosen])
        if best is None:
            return None
        return best[0][2], best[1]

    # ------------------------------------------------------------------ committing

    def commit(self, i: int, victims: list[RunningTask], need: Resources, preemptor: str) -> list[Preemption]:
        """Preempt ``victims`` (with their gangs) and promise worker ``i`` to ``need``."""
        preemptions: list[Preemption] = []
        for victim in victims:
            group = self.gangs[victim.job_id] if victim.group_by is not None else (victim,)
            for task in group:
                if task.task_id in self.taken:
                    continue
                self.taken.add(task.task_id)
                self._release(self.fleet.index[task.worker_id], task)
                preemptions.append(Preemption(task.task_id, task.worker_id, preemptor))
        self._reserve(i, need)
        return preemptions

    def _reserve(self, i: int, need: Resources) -> None:
        fleet = self.fleet
        pool = self.pool.setdefault(i, [0, 0, 0, 0])
        for d, (free, amount) in enumerate(
            zip((fleet.free_cpu, fleet.free_mem, fleet.free_disk, fleet.free_dev), _vector(need), strict=True)
        ):
            from_free = max(0, min(free[i], amount))
            free[i] -= from_free
            pool[d] -= amount - from_free
