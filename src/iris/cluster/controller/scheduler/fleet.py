"""The workers of one scheduling pass as flat arrays, and the feasible workers of each task shape.

Tasks are grouped by *shape*: identical resources and constraints. Everything static about a
shape (which schedulable workers satisfy its constraints and taints, offer its device and are
big enough when empty) is computed once per pass, no matter how many tasks share it.

Placement spreads work: each shape walks its feasible workers round-robin, starting from the
one with the most free cpu at the start of the pass (ties in worker order). A worker that does
not fit is dropped from the shape's rotation for the rest of the pass, which is exact because
free capacity only shrinks during a pass; when the rotation is empty the shape is exhausted and
its remaining tasks are skipped at once. A pick is O(1) amortised. Tasks that need no
accelerator go to workers without one first and spill onto accelerator workers only when those
are full, so cpu work does not fragment the GPU/TPU machines that gangs and device tasks need.
Preferences (soft constraints) rank before that: workers satisfying more of a task's preferences
form earlier tiers of the rotation; a tier is used up before the next is tried, so a preference
only chooses among workers that fit and never makes a task wait.
(An exact "most free cpu" per pick, with a lazy heap per shape, cost ~8 us per placement: every
placement made the same worker stale in every other shape's heap. The rotation costs ~1 us.)
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import final

from iris.rpc.models import Constraint

from .constraints import ConstraintKey, constraint_key, predicate, taints_of, tolerated_taints
from .model import Resources, TaskRequest, WorkerView

ShapeKey = tuple[int, int, int, str, str, int, tuple[ConstraintKey, ...], tuple[ConstraintKey, ...]]


@final
@dataclass(slots=True, eq=False)
class Shape:
    """All pending tasks with the same resources, constraints and preferences."""

    resources: Resources
    constraints: tuple[Constraint, ...]
    eligible: list[int]  # schedulable, constraints and taints satisfied
    feasible: list[int]  # eligible, offers the device and big enough when empty
    preferences: tuple[Constraint, ...] = ()
    order: list[int] | None = None  # round-robin order over workers that may still fit it
    cursor: int = 0  # next position in ``order``
    # Later tiers of workers (fewer preferences met; accelerator workers for cpu work), in order.
    spill: list[list[int]] = field(default_factory=list[list[int]])
    exhausted: bool = False
    no_plan_ranks: set[int] = field(default_factory=set[int])  # bands for which nothing can be freed
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
        # Workers with identical capacity and device form one class: static fit is per class.
        self._classes: dict[tuple[int, int, int, int, str, str], int] = {}
        for i in self.schedulable:
            key = (
                self.cap_cpu[i],
                self.cap_mem[i],
                self.cap_disk[i],
                self.cap_dev[i],
                self.dev_type[i],
                self.dev_variant[i],
            )
            self._classes[key] = self._classes.get(key, 0) | 1 << i
        self._constraint_masks: dict[ConstraintKey, int] = {}
        self._eligible: dict[tuple[ConstraintKey, ...], int] = {}
        self._keys_by_id: dict[int, tuple[ConstraintKey, ...]] = {}
        self._shapes: dict[ShapeKey, Shape] = {}
        self._shapes_by_id: dict[tuple[int, int, int], Shape] = {}
        self._index_lists: dict[int, list[int]] = {}

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

    def _eligible_mask(self, keys: tuple[ConstraintKey, ...], constraints: tuple[Constraint, ...]) -> int:
        """Schedulable workers satisfying the constraints whose taints are all tolerated."""
        mask = self._eligible.get(keys)
        if mask is None:
            mask = self.constraints_mask(constraints)
            if self.taints:
                tolerated = tolerated_taints(constraints)
                for i, taints in self.taints.items():
                    if not taints <= tolerated:
                        mask &= ~(1 << i)
            self._eligible[keys] = mask
        return mask

    # ------------------------------------------------------------------ shapes

    def shape_for(self, task: TaskRequest) -> Shape:
        """The shape of ``task``; tasks sharing resource and constraint objects hit a fast path."""
        r = task.resources
        constraints = task.constraints
        preferences = task.preferences
        fast = (id(r), id(constraints), id(preferences))  # the task holds all three for the pass
        shape = self._shapes_by_id.get(fast)
        if shape is not None:
            return shape
        if constraints:
            keys = self._keys_by_id.get(id(constraints))
            if keys is None:
                keys = tuple(constraint_key(c) for c in constraints)
                self._keys_by_id[id(constraints)] = keys
        else:
            keys = ()
        key = (
            r.cpu_millicores,
            r.memory_bytes,
            r.disk_bytes,
            r.device_type,
            r.device_variant,
            r.device_count,
            keys,
            tuple(constraint_key(c) for c in preferences),
        )
        shape = self._shapes.get(key)
        if shape is None:
            shape = self._new_shape(r, constraints, keys)
            shape.preferences = preferences
            self._shapes[key] = shape
        self._shapes_by_id[fast] = shape
        return shape

    def _new_shape(
        self, r: Resources, constraints: tuple[Constraint, ...], keys: tuple[ConstraintKey, ...]
    ) -> Shape:
        eligible = self._eligible_mask(keys, constraints)
        big_enough = 0
        for (cpu, mem, disk, dev, dev_type, dev_variant), members in self._classes.items():
            if (
                cpu >= r.cpu_millicores
                and mem >= r.memory_bytes
                and disk >= r.disk_bytes
                and dev >= r.device_count
                and _device_ok(r, dev_type, dev_variant)
            ):
                big_enough |= members
        return Shape(r, constraints, self._indices(eligible), self._indices(eligible & big_enough))

    def _indices(self, mask: int) -> list[int]:
        """Worker indices in a bitmask, in worker order; shapes often share masks, so memoised."""
        found = self._index_lists.get(mask)
        if found is None:
            bits = bin(mask)[:1:-1]
            found = self._index_lists[mask] = [i for i, bit in enumerate(bits) if bit == "1"]
        return found

    def offers_device(self, i: int, r: Resources) -> bool:
        return _device_ok(r, self.dev_type[i], self.dev_variant[i])

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
        """Place one task of ``shape`` (round-robin, see the module docstring); -1 if none fits."""
        order = shape.order
        if order is None:
            order = self._start(shape)
        r = shape.resources
        cpu, mem, disk, dev = r.cpu_millicores, r.memory_bytes, r.disk_bytes, r.device_count
        free_cpu, free_mem, free_disk, free_dev = self.free_cpu, self.free_mem, self.free_disk, self.free_dev
        cursor = shape.cursor
        while order:
            if cursor >= len(order):
                cursor = 0
            i = order[cursor]
            if free_cpu[i] >= cpu and free_mem[i] >= mem and free_disk[i] >= disk and free_dev[i] >= dev:
                free_cpu[i] -= cpu
                free_mem[i] -= mem
                free_disk[i] -= disk
                free_dev[i] -= dev
                shape.cursor = cursor + 1
                return i
            del order[cursor]  # free capacity only shrinks in a pass: it never fits this shape again
            if not order and shape.spill:
                order = shape.order = self._by_free_cpu(shape.spill.pop(0))
                cursor = 0
        shape.exhausted = True
        return -1

    def _start(self, shape: Shape) -> list[int]:
        tiers = self.tiers(shape)
        shape.spill = tiers[1:]
        shape.order = self._by_free_cpu(tiers[0])
        return shape.order

    def preference_score(self, shape: Shape, i: int) -> int:
        """How many of the shape's preferences worker ``i`` satisfies."""
        return sum(self.constraint_mask(p) >> i & 1 for p in shape.preferences)

    def tiers(self, shape: Shape) -> list[list[int]]:
        """The feasible workers in the order they are tried: more preferences met first, then (for
        work without a device) workers without an accelerator before those with one."""
        feasible = shape.feasible
        r = shape.resources
        avoid_devices = not (r.device_type or r.device_count)
        if not shape.preferences and not avoid_devices:
            return [list(feasible)]
        dev_type = self.dev_type
        by_rank: dict[tuple[int, bool], list[int]] = {}
        for i in feasible:
            score = self.preference_score(shape, i) if shape.preferences else 0
            by_rank.setdefault((-score, avoid_devices and bool(dev_type[i])), []).append(i)
        return [by_rank[k] for k in sorted(by_rank)] or [[]]

    def _by_free_cpu(self, workers: list[int]) -> list[int]:
        """Most free cpu first; ties keep worker order (the sort is stable)."""
        return sorted(workers, key=self.free_cpu.__getitem__, reverse=True)


def _device_ok(r: Resources, device_type: str, variant: str) -> bool:
    if not r.device_type and not r.device_count:
        return True
    if r.device_type and r.device_type != device_type:
        return False
    return not r.device_variant or r.device_variant == variant


def _mask(indices: Iterable[int]) -> int:
    mask = 0
    for i in indices:
        mask |= 1 << i
    return mask
