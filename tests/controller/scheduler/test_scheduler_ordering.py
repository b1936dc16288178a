"""Who goes first: bands, depth, tree age, round-robin across users; no head-of-line blocking;
and where tasks land (spread, accelerator machines last)."""

from __future__ import annotations

import pytest
from tests.controller.scheduler.scheduler_helpers import BATCH, INTER, PROD, gang, placed, res, task, worker

from iris.cluster.controller.scheduler import schedule

BIG = worker("big", cpu=1000, mem=1000)


def order_of(tasks) -> list[str]:
    """The order a pass tries tasks in: with room for all, assignments come out in that order."""
    result = schedule(tasks, [BIG])
    assert not result.pending
    return [task_id for task_id, _ in result.assignments]


@pytest.mark.parametrize(
    ("case", "tasks", "expected"),
    [
        (
            "bands",
            [task("/u/b/0", band=BATCH), task("/u/i/0", band=INTER), task("/u/p/0", band=PROD)],
            ["/u/p/0", "/u/i/0", "/u/b/0"],
        ),
        (
            "band beats depth",
            [task("/u/deep/0", band=BATCH, depth=5), task("/u/root/0", band=INTER, depth=1)],
            ["/u/root/0", "/u/deep/0"],
        ),
        (
            "deeper trees first",
            [task("/u/a/0", depth=1), task("/u/a/b/0", depth=2), task("/u/a/b/c/0", depth=3)],
            ["/u/a/b/c/0", "/u/a/b/0", "/u/a/0"],
        ),
        (
            "older root submission first",
            [task("/u/new/0", root_submitted_at=20), task("/u/old/0", root_submitted_at=10)],
            ["/u/old/0", "/u/new/0"],
        ),
        (
            "then submission order",
            [
                task("/u/j2/0", root_submitted_at=1, submitted_at=3),
                task("/u/j1/0", root_submitted_at=1, submitted_at=2),
            ],
            ["/u/j1/0", "/u/j2/0"],
        ),
        (
            "then input order",
            [task("/u/j/1"), task("/u/j/0")],
            ["/u/j/1", "/u/j/0"],
        ),
        (
            "round-robin across users beats tree age",
            [task(f"/alice/big/{i}", user="alice", root_submitted_at=1) for i in range(4)]
            + [task("/bob/small/0", user="bob", root_submitted_at=50)],
            ["/alice/big/0", "/bob/small/0", "/alice/big/1", "/alice/big/2", "/alice/big/3"],
        ),
        (
            "users take turns, oldest head first",
            [task(f"/a/j/{i}", user="a", root_submitted_at=5) for i in range(2)]
            + [task(f"/b/j/{i}", user="b", root_submitted_at=1) for i in range(2)]
            + [task(f"/c/j/{i}", user="c", root_submitted_at=3) for i in range(2)],
            ["/b/j/0", "/c/j/0", "/a/j/0", "/b/j/1", "/c/j/1", "/a/j/1"],
        ),
        (
            "gangs before other work of the band",
            [task("/u/solo/0", band=PROD), *gang("/u/g", 2, band=PROD), task("/u/inter/0")],
            ["/u/g/0", "/u/g/1", "/u/solo/0", "/u/inter/0"],
        ),
    ],
)
def test_order(case, tasks, expected):
    if any(t.group_by for t in tasks):
        slice_ = {"tpu-name": "s"}
        workers = [
            worker("g0", cpu=1000, mem=1000, attrs=slice_),
            worker("g1", cpu=1000, mem=1000, attrs=slice_),
        ]
        result = schedule(tasks, workers)
        got = [task_id for task_id, _ in result.assignments]
    else:
        got = order_of(tasks)
    assert got == expected, case


def test_one_users_ten_thousand_tasks_do_not_starve_another_users_one():
    flood = [task(f"/alice/j/{i}", user="alice", root_submitted_at=0) for i in range(10_000)]
    single = task("/bob/j/0", user="bob", root_submitted_at=100)
    result = schedule([*flood, single], [worker("w", cpu=2, mem=100)])
    assert placed(result) == {"/alice/j/0": "w", "/bob/j/0": "w"}
    assert result.pending["/alice/j/1"].position == 1
    assert result.pending["/alice/j/9999"].position == 9999


def test_no_head_of_line_blocking():
    tasks = [task("/u/huge/0", cpu=64, band=PROD), task("/u/small/0", cpu=1), task("/u/small/1", cpu=1)]
    result = schedule(tasks, [worker("w", cpu=2)])
    assert placed(result) == {"/u/small/0": "w", "/u/small/1": "w"}
    assert result.pending["/u/huge/0"].code == "exceeds_capacity"


def test_busy_big_task_does_not_block_small_ones_either():
    tasks = [task("/u/big/0", cpu=4, band=PROD), task("/u/small/0", cpu=1)]
    result = schedule(tasks, [worker("w", cpu=4, used=res(2, 0))])
    assert placed(result) == {"/u/small/0": "w"}
    assert result.pending["/u/big/0"].code == "resources"


def test_spreads_over_idle_workers():
    workers = [worker(f"w{i}", cpu=4) for i in range(4)]
    result = schedule([task(f"/u/j/{i}") for i in range(4)], workers)
    assert sorted(w for _, w in result.assignments) == ["w0", "w1", "w2", "w3"]


def test_starts_with_the_worker_with_most_free_cpu():
    workers = [
        worker("busy", cpu=8, used=res(6, 0)),
        worker("half", cpu=8, used=res(4, 0)),
        worker("idle", cpu=8),
    ]
    result = schedule([task("/u/j/0"), task("/u/j/1")], workers)
    assert [w for _, w in result.assignments] == ["idle", "half"]


def test_cpu_tasks_fill_plain_workers_before_accelerator_workers():
    workers = [worker("gpu", cpu=64, mem=64, device=("gpu", "a100", 8)), worker("cpu", cpu=2)]
    result = schedule([task(f"/u/j/{i}") for i in range(3)], workers)
    assert [w for _, w in result.assignments] == ["cpu", "cpu", "gpu"]


def test_max_assignments_caps_the_pass_and_queues_the_rest():
    tasks = [task(f"/u/j/{i}") for i in range(5)]
    result = schedule(tasks, [worker("w", cpu=8)], max_assignments=2)
    assert [t for t, _ in result.assignments] == ["/u/j/0", "/u/j/1"]
    assert {t: r.code for t, r in result.pending.items()} == {f"/u/j/{i}": "queued" for i in (2, 3, 4)}
    assert result.pending["/u/j/2"].message == "next in line; this pass already placed its limit of 2 tasks"
    assert result.pending["/u/j/4"].message == (
        "queued behind 2 higher-priority tasks; this pass placed its limit of 2 tasks"
    )
    assert [result.pending[f"/u/j/{i}"].position for i in (2, 3, 4)] == [1, 2, 3]


def test_max_assignments_zero_places_nothing():
    result = schedule([task("/u/j/0")], [worker("w")], max_assignments=0)
    assert result.assignments == []
    assert result.pending["/u/j/0"].code == "queued"


def test_positions_count_within_each_band():
    tasks = [
        task("/u/p/0", band=PROD, cpu=99),
        task("/u/i/0", cpu=99),
        task("/u/i/1", cpu=99),
        task("/u/b/0", band=BATCH, cpu=99),
    ]
    result = schedule(tasks, [worker("w")])
    assert {t: r.position for t, r in result.pending.items()} == {
        "/u/p/0": 1,
        "/u/i/0": 1,
        "/u/i/1": 2,
        "/u/b/0": 1,
    }


def test_the_one_walk_order_is_the_units_order() -> None:
    """order_pending (the pass's stage 1, one walk over the tasks) orders exactly as
    order_units(build_units(...)): bands, gangs, depth, tree age, fair share and its ties."""
    import random

    from iris.cluster.controller.scheduler.ordering import build_units, order_pending, order_units

    def ids(units) -> list[str]:
        return [u.task_id if hasattr(u, "task_id") else "gang:" + u.head.task_id for u in units]

    rng = random.Random(3)
    for _ in range(20):
        tasks = []
        for j in range(rng.randrange(1, 40)):
            user = f"u{rng.randrange(4)}"
            kw = {
                "user": user,
                "band": rng.choice((BATCH, INTER, PROD)),
                "depth": rng.randrange(1, 3),
                "root_submitted_at": float(rng.randrange(5)),
                "submitted_at": float(rng.randrange(5)),
                "cpu": rng.choice((0.1, 1, 4)),
            }
            if rng.random() < 0.2:
                tasks += gang(f"/{user}/g{j}", rng.randrange(1, 4), **kw)
            else:
                tasks += [task(f"/{user}/j{j}/{i}", **kw) for i in range(rng.randrange(1, 4))]
        rng.shuffle(tasks)
        for usage in (None, {"u1": 30.0, "u2": 2.0}):
            assert ids(order_pending(tasks, usage)) == ids(order_units(build_units(tasks), usage))


def test_the_one_walk_order_holds_for_tasks_in_runs_sharing_resources() -> None:
    """order_pending reuses the level and turn charge while consecutive tasks share band, depth,
    user and resources (one job's tasks, as the controller lists them): runs that change just one
    of those (or the resources object) still order exactly as order_units(build_units(...))."""
    import random
    from dataclasses import replace

    from iris.cluster.controller.scheduler.ordering import build_units, order_pending, order_units

    def ids(units) -> list[str]:
        return [u.task_id if hasattr(u, "task_id") else "gang:" + u.head.task_id for u in units]

    rng = random.Random(11)
    shared = [res(0.05, 1), res(1, 1), res(4, 2)]  # the same objects reused across tasks
    for _ in range(30):
        tasks = []
        current = task("/u0/j0/0", user="u0")
        for j in range(rng.randrange(1, 30)):
            change = rng.choice(("band", "depth", "user", "resources", "equal resources", "gang"))
            if change == "band":
                current = replace(current, band=rng.choice((BATCH, INTER, PROD)))
            elif change == "depth":
                current = replace(current, depth=rng.randrange(1, 4))
            elif change == "user":
                current = replace(current, user=f"u{rng.randrange(4)}")
            elif change == "resources":
                current = replace(current, resources=rng.choice(shared))
            elif change == "equal resources":  # equal, but another object
                current = replace(current, resources=replace(current.resources))
            job = f"/{current.user}/j{j}"
            root, at = float(rng.randrange(3)), float(rng.randrange(3))
            base = replace(current, root_submitted_at=root, submitted_at=at, job_id=job)
            size = rng.randrange(1, 5)
            if change == "gang":
                base = replace(base, group_by="tpu-name", gang_size=size)
            tasks += [replace(base, task_id=f"{job}/{i}") for i in range(size)]
        for usage in (None, {"u1": 30.0, "u2": 2.0, "u3": 60.0}):
            assert ids(order_pending(tasks, usage)) == ids(order_units(build_units(tasks), usage))
