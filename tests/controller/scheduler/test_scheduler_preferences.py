"""Preferences (soft constraints): chosen first where they hold, never a reason to wait."""

from __future__ import annotations

from tests.controller.scheduler.scheduler_helpers import con, gang, placed, res, task, worker

from iris.cluster.controller.scheduler import schedule


def zoned(worker_id: str, zone: str, **kwargs):
    return worker(worker_id, attrs={"zone": zone}, **kwargs)


def test_a_preferred_worker_is_chosen_over_one_with_more_free_cpu():
    workers = [zoned("big-a", "a", cpu=16), zoned("small-b", "b", cpu=2)]
    result = schedule([task("/u/j/0", preferences=(con("zone", value="b"),))], workers)
    assert placed(result) == {"/u/j/0": "small-b"}


def test_without_preferences_the_most_free_cpu_wins():
    workers = [zoned("big-a", "a", cpu=16), zoned("small-b", "b", cpu=2)]
    assert placed(schedule([task("/u/j/0")], workers)) == {"/u/j/0": "big-a"}


def test_tasks_spill_to_other_workers_when_preferred_ones_are_full():
    workers = [zoned("a-0", "a", cpu=2), zoned("b-0", "b", cpu=2)]
    tasks = [task(f"/u/j/{i}", cpu=1, preferences=(con("zone", value="b"),)) for i in range(4)]
    got = placed(schedule(tasks, workers))
    assert len(got) == 4, "a preference never makes a task wait"
    assert sorted(got.values()) == ["a-0", "a-0", "b-0", "b-0"]
    assert got["/u/j/0"] == got["/u/j/1"] == "b-0", "the preferred worker is filled first"


def test_a_preference_no_worker_meets_blocks_nothing():
    result = schedule([task("/u/j/0", preferences=(con("zone", value="mars"),))], [zoned("a-0", "a")])
    assert placed(result) == {"/u/j/0": "a-0"}
    assert result.pending == {}


def test_workers_meeting_more_preferences_rank_first():
    workers = [
        worker("none", cpu=16, attrs={"zone": "a"}),
        worker("one", cpu=4, attrs={"zone": "b"}),
        worker("two", cpu=4, attrs={"zone": "b", "disk": "ssd"}),
    ]
    prefs = (con("zone", value="b"), con("disk", value="ssd"))
    tasks = [task(f"/u/j/{i}", cpu=4, preferences=prefs) for i in range(3)]
    got = placed(schedule(tasks, workers))
    assert [got[f"/u/j/{i}"] for i in range(3)] == ["two", "one", "none"]


def test_hard_constraints_still_hold_with_preferences():
    workers = [zoned("a-0", "a"), zoned("b-0", "b")]
    t = task("/u/j/0", constraints=(con("zone", value="a"),), preferences=(con("zone", value="b"),))
    assert placed(schedule([t], workers)) == {"/u/j/0": "a-0"}


def test_preferences_rank_before_keeping_cpu_work_off_accelerators():
    workers = [
        worker("cpu", cpu=8, attrs={"zone": "a"}),
        worker("gpu", cpu=8, attrs={"zone": "b"}, device=("gpu", "a100", 8)),
    ]
    plain = placed(schedule([task("/u/j/0")], workers))
    assert plain == {"/u/j/0": "cpu"}
    preferring = placed(schedule([task("/u/k/0", preferences=(con("zone", value="b"),))], workers))
    assert preferring == {"/u/k/0": "gpu"}


def test_tasks_with_different_preferences_are_different_shapes():
    workers = [zoned("a-0", "a", cpu=8), zoned("b-0", "b", cpu=8)]
    tasks = [
        task("/u/x/0", preferences=(con("zone", value="a"),)),
        task("/u/y/0", preferences=(con("zone", value="b"),)),
    ]
    assert placed(schedule(tasks, workers)) == {"/u/x/0": "a-0", "/u/y/0": "b-0"}


def test_a_gang_goes_to_the_group_that_meets_its_preferences():
    workers = [worker(f"r1-{i}", attrs={"tpu-name": "r1", "zone": "a"}) for i in range(2)] + [
        worker(f"r2-{i}", attrs={"tpu-name": "r2", "zone": "b"}) for i in range(4)
    ]
    # Without preferences the smallest group that fits (r1) wins; the preference picks r2.
    assert set(placed(schedule(gang("/u/g", 2), workers)).values()) == {"r1-0", "r1-1"}
    members = gang("/u/h", 2, preferences=(con("zone", value="b"),))
    assert {w.split("-")[0] for w in placed(schedule(members, workers)).values()} == {"r2"}


def test_a_gang_prefers_the_workers_of_its_group_that_meet_preferences():
    workers = [worker(f"s-{i}", attrs={"tpu-name": "s", "ssd": "yes" if i >= 2 else "no"}) for i in range(4)]
    members = gang("/u/g", 2, preferences=(con("ssd", value="yes"),))
    assert sorted(placed(schedule(members, workers)).values()) == ["s-2", "s-3"]


def test_a_busy_preferred_worker_is_skipped_in_favour_of_a_free_one():
    workers = [zoned("b-0", "b", cpu=2, used=res(2, 0)), zoned("a-0", "a", cpu=2)]
    got = placed(schedule([task("/u/j/0", preferences=(con("zone", value="b"),))], workers))
    assert got == {"/u/j/0": "a-0"}
