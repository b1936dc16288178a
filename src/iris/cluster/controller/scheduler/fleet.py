"""The workers of one scheduling pass as flat arrays, and the feasible workers of each task shape.

Tasks are grouped by *shape*: identical resources and constraints. Everything static about a
shape (which schedulable workers satisfy its constraints and taints, offer its device and are
big enough when empty) is computed once per pass, no matter how many tasks share it.

Placement spreads: among a shape's feasible workers it picks the one with the most free cpu
(ties to the earlier worker). Each shape keeps a lazy max-heap of (free cpu, worker); because
free capacity only shrinks during a pass, a stale heap entry over-estimates and is corrected
when it surfaces, a worker that fails the shape on memory, disk or devices is dropped for good,
and once the top worker lacks the cpu the shape is exhausted for the rest of the pass. A pick
costs O(log workers) amortised, so spreading is as cheap as first-fit here.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from heapq import heapify, heappop, heapreplace

from iris.rpc.models import Constraint

from .constraints import ConstraintKey, constraint_key, predicate, taints_of, tolerated_taints
from .model import Resources, TaskRequest, WorkerView

ShapeKey = tuple[int, int, int, str, str, int, tuple[ConstraintKey, ...]]


@dataclass(slots=True, eq=False)
class Shape:
    """All pending tasks with the same resources and constraints."""

    resources: Resources
    constraints: tuple[Constraint, ...]
    eligible: list[int]  # schedulable, constraints and taints satisfied
    feasible: list[int]  # eligible, offers the device and big enough when empty
    heap: list[tuple[int, int]] | None = None  # (-free cpu, worker index), lazily corrected
    exhausted: bool = False
    no_plan_ranks: set[int] = field(default_factory=set)  # bands for which nothing can be freed
    feasible_set: frozenset[int] | None = None


class Fleet:
    """Per-worker capacity and free vectors, plus per-pass memos of constraint evaluation."""

    def __init__(self, workers: Sequence[WorkerView]) -> None:
        self.workers = list(workers)
        self.ids = [w.worker_id for w in self.workers]
        self.index = {worker_id: i for i, worker_id in enumerate(self.ids)}
        self.attributes = [w.attributes for w in self.workers]
        capacity = [w.capacity for w in self.workers]
        used = [w.used for w in self.workers]
        self.cap_cpu = [c.cpu_millicores for c in capacity]
        self.cap_mem = [c.memory_bytes for c in capacity]
        self.cap_disk = [c.disk_bytes for c in capacity]
        self.cap_dev = [c.device_count for c in capacity]
        self.dev_type = [c.device_type.lower() for c in capacity]
        self.dev_variant = [c.device_variant.lower() for c in capacity]
        self.free_cpu = [c.cpu_millicores - u.cpu_millicores for c, u in zip(capacity, used, strict=True)]
        self.free_mem = [c.memory_bytes - u.memory_bytes for c, u in zip(capacity, used, strict=True)]
        self.free_disk = [c.disk_bytes - u.disk_bytes for c, u in zip(capacity, used, strict=True)]
        self.free_dev = [c.device_count - u.device_count for c, u in zip(capacity, used, strict=True)]
        self.schedulable = [i for i, w in enumerate(self.workers) if w.schedulable]
        self.schedulable_mask = _mask(self.schedulable)
        self.taints = {i: t for i in self.schedulable if (t := taints_of(self.attributes[i]))}
        self._constraint_masks: dict[ConstraintKey, int] = {}
        self._eligible: dict[tuple[ConstraintKey, ...], list[int]] = {}
        self._keys_by_id: dict[int, tuple[ConstraintKey, ...]] = {}
        self._shapes: dict[ShapeKey, Shape] = {}

    def __len__(self) -> int:
        return len(self.ids)

    # ------------------------------------------------------------------ constraints

    def constraint_mask(self, constraint: Constraint) -> int:
        """Bitmask of schedulable workers satisfying one constraint."""
        key = constraint_key(constraint)
        mask = self._constraint_masks.get(key)
        if mask is None:
            ok = predicate(constraint)
            name = constraint.key
            attributes = self.attributes
            mask = _mask(i for i in self.schedulable if ok(attributes[i].get(name)))
            self._constraint_masks[key] = mask
        return mask

    def constraints_mask(self, constraints: Sequence[Constraint]) -> int:
        mask = self.schedulable_mask
        for constraint in constraints:
            mask &= self.constraint_mask(constraint)
        return mask

    def untolerated(self, i: int, constraints: Sequence[Constraint]) -> frozenset[str]:
        """Taints of worker ``i`` that the constraints do not tolerate."""
        taints = self.taints.get(i)
        return taints - tolerated_taints(constraints) if taints else frozenset()

    def _eligible_for(self, keys: tuple[ConstraintKey, ...], constraints: tuple[Constraint, ...]) -> list[int]:
        eligible = self._eligible.get(keys)
        if eligible is None:
            eligible = _indices(self.constraints_mask(constraints))
            if self.taints:
                tolerated = tolerated_taints(constraints)
                taints = self.taints
                eligible = [i for i in eligible if i not in taints or taints[i] <= tolerated]
            self._eligible[keys] = eligible
        return eligible

    # ------------------------------------------------------------------ shapes

    def shape_for(self, task: TaskRequest) -> Shape:
        constraints = task.constraints
        if constraints:
            keys = self._keys_by_id.get(id(constraints))
            if keys is None:
                keys = tuple(constraint_key(c) for c in constraints)
                self._keys_by_id[id(constraints)] = keys
        else:
            keys = ()
        r = task.resources
        key = (
            r.cpu_millicores,
            r.memory_bytes,
            r.disk_bytes,
            r.device_type,
            r.device_variant,
            r.device_count,
            keys,
        )
        shape = self._shapes.get(key)
        if shape is None:
            shape = self._new_shape(r, constraints, keys)
            self._shapes[key] = shape
        return shape

    def _new_shape(
        self, r: Resources, constraints: tuple[Constraint, ...], keys: tuple[ConstraintKey, ...]
    ) -> Shape:
        eligible = self._eligible_for(keys, constraints)
        cpu, mem, disk, dev = r.cpu_millicores, r.memory_bytes, r.disk_bytes, r.device_count
        feasible = [
            i
            for i in eligible
            if self.cap_cpu[i] >= cpu
            and self.cap_mem[i] >= mem
            and self.cap_disk[i] >= disk
            and self.cap_dev[i] >= dev
            and self.offers_device(i, r)
        ]
        return Shape(r, constraints, eligible, feasible)

    def offers_device(self, i: int, r: Resources) -> bool:
        if not r.device_type and not r.device_count:
            return True
        if r.device_type and r.device_type != self.dev_type[i]:
            return False
        return not r.device_variant or r.device_variant == self.dev_variant[i]

    # ------------------------------------------------------------------ free capacity

    def fits(self, i: int, r: Resources) -> bool:
        return (
            self.free_cpu[i] >= r.cpu_millicores
            and self.free_mem[i] >= r.memory_bytes
            and self.free_disk[i] >= r.disk_bytes
            and self.free_dev[i] >= r.device_count
        )

    def take(self, i: int, r: Resources) -> None:
        self.free_cpu[i] -= r.cpu_millicores
        self.free_mem[i] -= r.memory_bytes
        self.free_disk[i] -= r.disk_bytes
        self.free_dev[i] -= r.device_count

    def pick(self, shape: Shape) -> int:
        """Place one task of ``shape`` on the feasible worker with most free cpu; -1 if none fits."""
        heap = shape.heap
        if heap is None:
            free_cpu = self.free_cpu
            heap = shape.heap = [(-free_cpu[i], i) for i in shape.feasible]
            heapify(heap)
        r = shape.resources
        cpu, mem, disk, dev = r.cpu_millicores, r.memory_bytes, r.disk_bytes, r.device_count
        free_cpu, free_mem, free_disk, free_dev = self.free_cpu, self.free_mem, self.free_disk, self.free_dev
        while heap:
            neg_cpu, i = heap[0]
            have = free_cpu[i]
            if have != -neg_cpu:
                heapreplace(heap, (-have, i))
                continue
            if have < cpu:
                break
            if free_mem[i] >= mem and free_disk[i] >= disk and free_dev[i] >= dev:
                free_cpu[i] = have - cpu
                free_mem[i] -= mem
                free_disk[i] -= disk
                free_dev[i] -= dev
                heapreplace(heap, (cpu - have, i))
                return i
            heappop(heap)
        shape.exhausted = True
        return -1


def _mask(indices) -> int:
    mask = 0
    for i in indices:
        mask |= 1 << i
    return mask


def _indices(mask: int) -> list[int]:
    bits = bin(mask)[:1:-1]
    return [i for i, bit in enumerate(bits) if bit == "1"]
