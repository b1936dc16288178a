"""Properties of any pass over random snapshots (hypothesis)."""

from __future__ import annotations

from collections import defaultdict

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.controller.scheduler.scheduler_helpers import GB, con

from iris.cluster.controller.scheduler import (
    ReasonCode,
    Resources,
    RunningTask,
    TaskRequest,
    WorkerView,
    satisfies,
    schedule,
)
from iris.rpc.enums import PriorityBand

BANDS = list(PriorityBand)
RANK = {band: band.rank for band in BANDS}
CONSTRAINTS = [
    con("zone", "EQ", "a"),
    con("zone", "NE", "a"),
    con("zone", "IN", values=["a", "b"]),
    con("zone", "NOT_EXISTS"),
    con("gen", "GE", "4"),
    con("gen", "LT", "5"),
    con("taint:spot", "EXISTS"),
]
PROPERTY_SETTINGS = settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def amounts(draw, cores: int, gigabytes: int) -> tuple[int, int]:
    return draw(st.integers(0, cores * 2)) * 500, draw(st.integers(0, gigabytes)) * GB


@st.composite
def snapshots(draw, gangs: bool = True, stopping: bool = True):
    workers: list[WorkerView] = []
    for n in range(draw(st.integers(0, 7))):
        cpu, mem = amounts(draw, 8, 16)
        device = draw(st.sampled_from([("", "", 0), ("gpu", "a100", 4), ("gpu", "h100", 2)]))
        attrs = {}
        if draw(st.booleans()):
            attrs["zone"] = draw(st.sampled_from(["a", "b", "c"]))
        if draw(st.booleans()):
            attrs["gen"] = draw(st.sampled_from(["3", "4", "5", "v5"]))
        if draw(st.booleans()):
            attrs["tpu-name"] = draw(st.sampled_from(["s0", "s1"]))
        if draw(st.integers(0, 5)) == 0:
            attrs["taint:spot"] = "1"
        capacity = Resources(cpu, mem, 100 * GB, *device)
        workers.append(WorkerView(f"w{n}", capacity, Resources(), attrs, draw(st.integers(0, 6)) > 0))

    held: list[RunningTask] = []
    for w in workers:
        for k in range(draw(st.integers(0, 3))):
            cpu, mem = amounts(draw, 3, 6)
            gang_member = gangs and draw(st.integers(0, 4)) == 0
            held.append(
                RunningTask(
                    task_id=f"/run/{w.worker_id}-{k}/0" if not gang_member else f"/run/g{k}/{w.worker_id}",
                    job_id=f"/run/{w.worker_id}-{k}" if not gang_member else f"/run/g{k}",
                    worker_id=w.worker_id,
                    resources=Resources(cpu, mem, 0, w.capacity.device_type, "", draw(st.integers(0, 1))),
                    band=draw(st.sampled_from(BANDS)),
                    started_at=float(draw(st.integers(0, 5))),
                    group_by="tpu-name" if gang_member else None,
                    stopping=stopping and draw(st.integers(0, 4)) == 0,
                )
            )
    used: dict[str, Resources] = defaultdict(Resources)
    for t in held:
        used[t.worker_id] = used[t.worker_id] + t.resources
    workers = [
        WorkerView(w.worker_id, w.capacity, used[w.worker_id], w.attributes, w.schedulable) for w in workers
    ]

    pending: list[TaskRequest] = []
    for j in range(draw(st.integers(0, 10))):
        user = draw(st.sampled_from(["alice", "bob", "carol"]))
        band = draw(st.sampled_from(BANDS))
        cpu, mem = amounts(draw, 4, 8)
        device = draw(st.sampled_from([("", "", 0), ("", "", 0), ("gpu", "", 1), ("gpu", "h100", 2)]))
        constraints = tuple(draw(st.lists(st.sampled_from(CONSTRAINTS), max_size=2)))
        is_gang = gangs and draw(st.integers(0, 3)) == 0
        size = draw(st.integers(1, 3))
        gang_size = size + (draw(st.integers(0, 5)) == 0) if is_gang else 1
        for i in range(size):
            pending.append(
                TaskRequest(
                    task_id=f"/{user}/j{j}/{i}",
                    job_id=f"/{user}/j{j}",
                    user=user,
                    resources=Resources(cpu, mem, 0, *device),
                    constraints=constraints,
                    band=band,
                    depth=draw(st.integers(1, 3)),
                    root_submitted_at=float(draw(st.integers(0, 3))),
                    submitted_at=float(j),
                    group_by="tpu-name" if is_gang else None,
                    gang_size=gang_size,
                )
            )
    max_assignments = draw(st.one_of(st.none(), st.integers(0, 8)))
    return pending, workers, held, draw(st.booleans()), max_assignments


def _device_ok(request: Resources, capacity: Resources) -> bool:
    return request.device_matches(capacity)


def _tolerates(task: TaskRequest, attrs) -> bool:
    return all(
        any(c.key == key and c.op in ("EXISTS", "EQ") for c in task.constraints)
        for key in attrs
        if key.startswith("taint:")
    )


@PROPERTY_SETTINGS
@given(snapshots())
def test_pass_invariants(snapshot):
    pending, workers, held, allow_preemption, max_assignments = snapshot
    result = schedule(
        pending, workers, held, allow_preemption=allow_preemption, max_assignments=max_assignments
    )
    tasks = {t.task_id: t for t in pending}
    by_id = {w.worker_id: w for w in workers}
    assigned = dict(result.assignments)

    # every task is either assigned (once) or has a reason, never both
    assert len(assigned) == len(result.assignments)
    assert set(assigned) | set(result.pending) == set(tasks)
    assert not set(assigned) & set(result.pending)

    # never over-commit a worker
    load: dict[str, Resources] = defaultdict(Resources)
    for task_id, worker_id in result.assignments:
        load[worker_id] = load[worker_id] + tasks[task_id].resources
    for worker_id, added in load.items():
        w = by_id[worker_id]
        total = w.used + added
        assert total.cpu_millicores <= w.capacity.cpu_millicores
        assert total.memory_bytes <= w.capacity.memory_bytes
        assert total.disk_bytes <= w.capacity.disk_bytes
        assert total.device_count <= w.capacity.device_count

    # only schedulable workers that satisfy constraints, taints and device kind
    for task_id, worker_id in result.assignments:
        t, w = tasks[task_id], by_id[worker_id]
        assert w.schedulable
        assert all(satisfies(c, w.attributes) for c in t.constraints)
        assert _tolerates(t, w.attributes)
        assert _device_ok(t.resources, w.capacity)

    # gangs: all members or none, on distinct workers sharing one group value
    jobs: dict[str, list[TaskRequest]] = defaultdict(list)
    for t in pending:
        if t.group_by:
            jobs[t.job_id].append(t)
    for members in jobs.values():
        placed_members = [m for m in members if m.task_id in assigned]
        assert len(placed_members) in (0, len(members))
        if placed_members:
            hosts = [assigned[m.task_id] for m in members]
            assert len(set(hosts)) == len(hosts)
            values = {by_id[h].attributes.get(members[0].group_by) for h in hosts}
            assert len(values) == 1 and None not in values

    # preemption: strictly lower band, never a stopping task, each victim once, preemptor waits
    running_by_id = {t.task_id: t for t in held}
    victims = [p.victim_task_id for p in result.preemptions]
    assert len(victims) == len(set(victims))
    if not allow_preemption:
        assert not result.preemptions
    for p in result.preemptions:
        victim, preemptor = running_by_id[p.victim_task_id], tasks[p.preemptor_task_id]
        assert RANK[victim.band] > RANK[preemptor.band]
        assert not victim.stopping
        assert p.worker_id == victim.worker_id
        assert preemptor.task_id not in assigned
        assert result.pending[preemptor.task_id].code == ReasonCode.PREEMPTING
        if preemptor.group_by is None:
            assert victim.group_by is None

    # reasons: known codes, a message, positions 1..n within each band
    codes = {code.value for code in ReasonCode}
    positions: dict[PriorityBand, list[int]] = defaultdict(list)
    for task_id, reason in result.pending.items():
        assert reason.code in codes
        assert reason.message
        positions[tasks[task_id].band].append(reason.position)
    for band_positions in positions.values():
        assert sorted(band_positions) == list(range(1, len(band_positions) + 1))

    # the cap holds, except for a gang placed alone as the first thing in the pass
    if max_assignments is not None and len(result.assignments) > max_assignments:
        first_job = tasks[result.assignments[0][0]].job_id
        assert all(tasks[t].job_id == first_job and tasks[t].group_by for t in assigned)

    # pure: the same snapshot gives the same decisions
    again = schedule(
        pending, workers, held, allow_preemption=allow_preemption, max_assignments=max_assignments
    )
    assert again == result


@PROPERTY_SETTINGS
@given(snapshots(gangs=False, stopping=False))
def test_preemptors_are_promised_capacity_that_exists(snapshot):
    """On each worker, what stays + what this pass placed + what preemptors wait for <= capacity."""
    pending, workers, held, _, _ = snapshot
    result = schedule(pending, workers, held, allow_preemption=True)
    tasks = {t.task_id: t for t in pending}
    held_by_id = {t.task_id: t for t in held}
    committed: dict[str, Resources] = {w.worker_id: w.used for w in workers}
    for task_id, worker_id in result.assignments:
        committed[worker_id] = committed[worker_id] + tasks[task_id].resources
    preemptor_worker: dict[str, str] = {}
    for p in result.preemptions:
        committed[p.worker_id] = committed[p.worker_id] - held_by_id[p.victim_task_id].resources
        assert preemptor_worker.setdefault(p.preemptor_task_id, p.worker_id) == p.worker_id
    for preemptor, worker_id in preemptor_worker.items():
        committed[worker_id] = committed[worker_id] + tasks[preemptor].resources
    for w in workers:
        after = committed[w.worker_id]
        if w.worker_id in preemptor_worker.values():
            assert after.cpu_millicores <= w.capacity.cpu_millicores
            assert after.memory_bytes <= w.capacity.memory_bytes
            assert after.device_count <= w.capacity.device_count


@PROPERTY_SETTINGS
@given(snapshots(gangs=False, stopping=False))
def test_when_a_task_waits_on_resources_no_matching_worker_could_take_it(snapshot):
    """No head-of-line blocking and no missed fit: a task left with code "resources" or
    "exceeds_capacity" does not fit the free capacity left on any eligible worker.
    (Without preemption: a preemptor's promise legitimately holds back free capacity.)"""
    pending, workers, held, _, _ = snapshot
    result = schedule(pending, workers, held, allow_preemption=False)
    tasks = {t.task_id: t for t in pending}
    free = {w.worker_id: w.capacity - w.used for w in workers}
    for task_id, worker_id in result.assignments:
        free[worker_id] = free[worker_id] - tasks[task_id].resources
    for task_id, reason in result.pending.items():
        if reason.code not in ("resources", "exceeds_capacity"):
            continue
        t = tasks[task_id]
        for w in workers:
            if (
                w.schedulable
                and all(satisfies(c, w.attributes) for c in t.constraints)
                and _tolerates(t, w.attributes)
            ):
                f = free[w.worker_id]
                room = Resources(
                    f.cpu_millicores,
                    f.memory_bytes,
                    f.disk_bytes,
                    w.capacity.device_type,
                    w.capacity.device_variant,
                    f.device_count,
                )
                assert not t.resources.fits(room), (task_id, w.worker_id, reason)


@PROPERTY_SETTINGS
@given(snapshots(gangs=False, stopping=False))
def test_a_lower_band_never_takes_a_place_a_higher_band_task_of_the_same_shape_missed(snapshot):
    pending, workers, held, _, _ = snapshot
    result = schedule(pending, workers, held, allow_preemption=False)
    assigned = dict(result.assignments)
    for low in pending:
        if low.task_id not in assigned:
            continue
        for high in pending:
            same_shape = high.resources == low.resources and high.constraints == low.constraints
            if same_shape and RANK[high.band] < RANK[low.band]:
                assert high.task_id in assigned, (high.task_id, low.task_id)
