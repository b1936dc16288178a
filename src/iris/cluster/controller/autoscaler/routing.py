"""Which scale group can run a demand entry, and how many slices the demand needs.

A group fits an entry when one of its machines can hold one task (cpu, memory, disk, device)
and the attributes its workers register with satisfy the entry's constraints and taints, with
the scheduler's own constraint semantics. A gang also needs a slice of at least ``gang_size``
machines and an attribute to group by. A device of type ``cpu`` means "no accelerator", as in
the scheduler.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from iris.cluster.config import SLICE_ATTRIBUTE, ScaleGroupConfig
from iris.cluster.controller.scheduler.constraints import satisfies, taints_of, tolerated_taints
from iris.rpc.enums import ConstraintOp
from iris.rpc.models import Constraint, DeviceSpec, ResourceSpec
from iris.rpc.units import format_bytes, format_cpu

_UNLIMITED = 1 << 62


def _new_slice_matches(constraint: Constraint) -> bool:
    """A constraint on the ``slice`` attribute, as a slice that does not exist yet will satisfy it."""
    return constraint.op in (ConstraintOp.EXISTS, ConstraintOp.NE)


def group_misfit(
    group: ScaleGroupConfig,
    resources: ResourceSpec,
    constraints: Sequence[Constraint] = (),
    gang_size: int = 1,
    group_by: str | None = None,
) -> str | None:
    """Why ``group`` can never run such a task (or gang); None when it can."""
    if group.max_slices == 0:
        return "max_slices is 0"
    cap = group.resources
    want = _accelerator(resources)
    if want is not None:
        have = _accelerator(cap)
        if have is None:
            return f"needs {want.count} {want.type}, machines have no accelerator"
        if have.type.lower() != want.type.lower():
            return f"needs {want.type}, machines have {have.type}"
        if want.variant and want.variant.lower() != have.variant.lower():
            return f"needs {want.type} {want.variant}, machines have {have.variant or 'an unnamed variant'}"
        if want.count > have.count:
            return f"needs {want.count} {want.type} per task, a machine has {have.count}"
    if resources.cpu_millicores > cap.cpu_millicores:
        return f"needs {format_cpu(resources.cpu_millicores)} cpu per task, a machine has {format_cpu(cap.cpu_millicores)}"
    if resources.memory_bytes > cap.memory_bytes:
        return (
            f"needs {format_bytes(resources.memory_bytes)} memory per task, "
            f"a machine has {format_bytes(cap.memory_bytes)}"
        )
    if cap.disk_bytes and resources.disk_bytes > cap.disk_bytes:
        return f"needs {format_bytes(resources.disk_bytes)} disk per task, a machine has {format_bytes(cap.disk_bytes)}"
    attributes = group.worker_attributes()
    for constraint in constraints:
        if constraint.key == SLICE_ATTRIBUTE:
            if not _new_slice_matches(constraint):
                return (
                    f"constraint {constraint.describe()} names an existing slice; new slices cannot match it"
                )
            continue
        if not satisfies(constraint, attributes):
            have = attributes.get(constraint.key)
            detail = f"{constraint.key}={have}" if have is not None else f"no {constraint.key!r} attribute"
            return f"constraint {constraint.describe()} does not hold ({detail})"
    untolerated = sorted(taints_of(attributes) - tolerated_taints(constraints))
    if untolerated:
        return f"machines are tainted {untolerated[0]!r}; the job does not tolerate it"
    if group_by is not None:
        if gang_size > group.num_vms:
            return f"a gang of {gang_size} needs a slice of at least {gang_size} machines, slices have {group.num_vms}"
        if group_by != SLICE_ATTRIBUTE and group_by not in attributes:
            return f"workers have no {group_by!r} attribute to group the gang by"
    return None


def unfittable_reason(
    resources: ResourceSpec,
    constraints: Sequence[Constraint],
    groups: Iterable[ScaleGroupConfig],
    gang_size: int = 1,
    group_by: str | None = None,
) -> str | None:
    """Why no scale group could EVER run this job, or None if one could (or none are configured).

    Meant for submit-time rejection: a job that no group fits would otherwise pend forever.
    The answer lists each group's reason: ``"cpu: needs 64 cpu per task, a machine has 8; ..."``.
    """
    reasons: list[str] = []
    for group in groups:
        misfit = group_misfit(group, resources, constraints, gang_size, group_by)
        if misfit is None:
            return None
        reasons.append(f"{group.name}: {misfit}")
    if not reasons:
        return None
    return "; ".join(reasons)


class SlicePacker:
    """Tracks how many of a group's slices the demand routed so far fills.

    Slices ``[0, free_existing)`` are existing idle or booting slices; slices up to ``limit`` would
    have to be created. Independent tasks are packed onto machines first-fit within the slice being
    filled (next-fit across slices); a gang takes a whole slice.
    """

    def __init__(self, group: ScaleGroupConfig, free_existing: int, limit: int) -> None:
        self.group = group
        self.free_existing = free_existing
        self.limit = max(limit, 0)
        self.opened = 0
        self.tasks = 0
        self._capacity = _capacity(group)
        self._current: list[list[int]] = []

    def room(self, allow_new: bool) -> int:
        return (self.limit if allow_new else min(self.free_existing, self.limit)) - self.opened

    def place_gang(self, allow_new: bool, tasks: int) -> bool:
        if self.room(allow_new) <= 0:
            return False
        self.opened += 1
        self.tasks += tasks
        return True

    def place_tasks(self, resources: ResourceSpec, count: int, allow_new: bool) -> int:
        """Place up to ``count`` identical tasks; returns how many found room."""
        request = _request(resources)
        placed = self._fill_current(request, count)
        per_vm = _fit(self._capacity, request)
        if per_vm <= 0:
            return placed
        per_slice = per_vm * self.group.num_vms
        full = min((count - placed) // per_slice, max(self.room(allow_new), 0))
        if full > 0:
            self.opened += full
            placed += full * per_slice
            self._current = []
        if placed < count and self.room(allow_new) > 0:
            self.opened += 1
            self._current = [list(self._capacity) for _ in range(self.group.num_vms)]
            placed += self._fill_current(request, count - placed)
        self.tasks += placed
        return placed

    def _fill_current(self, request: tuple[int, ...], count: int) -> int:
        placed = 0
        for machine in self._current:
            if placed >= count:
                break
            k = min(count - placed, _fit(tuple(machine), request))
            if k > 0:
                for i, amount in enumerate(request):
                    machine[i] -= k * amount
                placed += k
        return placed


def _accelerator(resources: ResourceSpec) -> DeviceSpec | None:
    device = resources.device
    if device is None or device.count == 0 or device.type.lower() == "cpu":
        return None
    return device


def _capacity(group: ScaleGroupConfig) -> tuple[int, ...]:
    cap = group.resources
    device = _accelerator(cap)
    return (cap.cpu_millicores, cap.memory_bytes, cap.disk_bytes or _UNLIMITED, device.count if device else 0)


def _request(resources: ResourceSpec) -> tuple[int, ...]:
    device = _accelerator(resources)
    return (
        resources.cpu_millicores,
        resources.memory_bytes,
        resources.disk_bytes,
        device.count if device else 0,
    )


def _fit(capacity: tuple[int, ...], request: tuple[int, ...]) -> int:
    fits = _UNLIMITED
    for have, want in zip(capacity, request, strict=True):
        if want > 0:
            fits = min(fits, have // want)
    return fits
