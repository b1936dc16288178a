"""Gangs: all members at once on workers sharing one group value, or none."""

from __future__ import annotations

from tests.controller.scheduler.scheduler_helpers import con, gang, placed, res, task, worker

from iris.cluster.controller.scheduler import schedule


def slice_workers(name: str, count: int, *, cpu: float = 4, busy: int = 0, prefix: str | None = None):
    """``count`` workers of one slice; the first ``busy`` of them have no cpu free."""
    return [
        worker(
            f"{prefix or name}-{i}",
            cpu=cpu,
            attrs={"tpu-name": name},
            used=res(cpu, 0) if i < busy else None,
        )
        for i in range(count)
    ]


def test_places_all_members_on_one_group():
    workers = slice_workers("a", 4) + slice_workers("b", 4)
    result = schedule(gang("/u/g", 4), workers)
    got = placed(result)
    assert set(got) == {"/u/g/0", "/u/g/1", "/u/g/2", "/u/g/3"}
    assert {w.split("-")[0] for w in got.values()} in ({"a"}, {"b"})
    assert len(set(got.values())) == 4, "one member per worker"


def test_members_in_index_order_take_workers_in_order():
    members = gang("/u/g", 12)
    result = schedule(list(reversed(members)), slice_workers("a", 12))
    assert placed(result) == {f"/u/g/{i}": f"a-{i}" for i in range(12)}


def test_all_or_nothing_when_no_group_is_big_enough():
    workers = slice_workers("a", 4, busy=2) + slice_workers("b", 4, busy=1)
    result = schedule(gang("/u/g", 4), workers)
    assert result.assignments == []
    reason = result.pending["/u/g/0"]
    assert reason.code == "gang"
    assert reason.message == "needs 4 workers with the same tpu-name; the best group 'b' has 3 that fit"
    assert {r.message for r in result.pending.values()} == {reason.message}


def test_a_failed_gang_leaves_its_capacity_to_others():
    workers = slice_workers("a", 4, busy=2)
    result = schedule([*gang("/u/g", 4), task("/u/solo/0")], workers)
    assert list(placed(result)) == ["/u/solo/0"]


def test_smallest_group_that_fits_wins():
    workers = slice_workers("big", 8) + slice_workers("small", 2)
    result = schedule(gang("/u/g", 2), workers)
    assert sorted(placed(result).values()) == ["small-0", "small-1"]


def test_workers_without_the_attribute_are_not_candidates():
    workers = [worker(f"plain-{i}") for i in range(4)] + slice_workers("a", 1)
    result = schedule(gang("/u/g", 2), workers)
    assert result.assignments == []
    assert result.pending["/u/g/0"].message == (
        "needs 2 workers with the same tpu-name; the largest group 'a' has only 1 worker that could run it"
    )


def test_no_worker_has_the_attribute():
    result = schedule(gang("/u/g", 2), [worker("plain-0"), worker("plain-1")])
    assert result.pending["/u/g/1"].message == (
        "needs 2 workers with the same tpu-name; none of the 2 workers that could run it has attribute tpu-name"
    )


def test_gang_waits_until_all_members_are_pending():
    members = gang("/u/g", 4)[:3]  # the fourth is not pending (yet)
    result = schedule(members, slice_workers("a", 4))
    assert result.assignments == []
    assert result.pending["/u/g/0"].message == "waiting for all 4 tasks of the gang to be pending (3 are)"


def test_gang_constraints_are_respected():
    workers = slice_workers("a", 2) + [
        worker(f"b-{i}", attrs={"tpu-name": "b", "zone": "eu"}) for i in range(2)
    ]
    result = schedule(gang("/u/g", 2, constraints=(con("zone", "EQ", "eu"),)), workers)
    assert sorted(placed(result).values()) == ["b-0", "b-1"]


def test_gang_that_cannot_fit_anywhere_gets_the_shape_reason():
    result = schedule(gang("/u/g", 2, cpu=64), slice_workers("a", 2))
    assert result.pending["/u/g/0"].code == "exceeds_capacity"
    assert result.pending["/u/g/0"].message == "needs 64 cpu; no worker has more than 4 cpu capacity"


def test_gang_larger_than_remaining_cap_is_queued_but_small_work_continues():
    workers = slice_workers("a", 4, cpu=8)
    tasks = [task("/u/first/0", band="PRODUCTION"), *gang("/u/g", 4), task("/u/last/0")]
    result = schedule(tasks, workers, max_assignments=3)
    assert list(placed(result)) == ["/u/first/0", "/u/last/0"]
    assert result.pending["/u/g/0"].code == "queued"


def test_gang_larger_than_the_cap_still_places_alone_first():
    result = schedule(gang("/u/g", 4), slice_workers("a", 4), max_assignments=2)
    assert len(result.assignments) == 4


def test_two_gangs_do_not_share_workers():
    workers = slice_workers("a", 2) + slice_workers("b", 2)
    result = schedule([*gang("/u/g1", 2, cpu=4), *gang("/u/g2", 2, cpu=4)], workers)
    got = placed(result)
    assert len(got) == 4
    assert len(set(got.values())) == 4
