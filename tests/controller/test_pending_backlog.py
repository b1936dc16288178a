"""More PENDING tasks than a round considers: higher bands first, and no job (however big, or
however many jobs came before it) is hidden from the scheduling kernel by the cut."""

from __future__ import annotations

from iris.cluster.controller import store
from iris.rpc.enums import PriorityBand, TaskState
from iris.testing.round_harness import RoundHarness


def considered(h: RoundHarness, limit: int) -> list[str]:
    with h.controller.db.read() as cur:
        return [p.job_id for p in store.pending_tasks(cur, limit=limit)]


def test_a_later_production_job_and_a_later_small_job_are_considered_over_a_backlog() -> None:
    h = RoundHarness(workers=0, register=False)
    backlog = h.submit("backlog", replicas=500, priority=PriorityBand.BATCH, wait_for_capacity=True)
    small = h.submit("small", replicas=1, priority=PriorityBand.BATCH, wait_for_capacity=True)
    urgent = h.submit("urgent", replicas=3, priority=PriorityBand.PRODUCTION, wait_for_capacity=True)
    jobs = considered(h, limit=100)
    assert len(jobs) <= 100
    assert jobs[:3] == [urgent] * 3  # the higher band first, all of it
    assert small in jobs  # a later job of the same band is not hidden behind the big one
    assert jobs.count(backlog) == 10  # each job a share (a tenth of the limit), not the whole cut


def test_under_the_limit_every_pending_task_is_considered() -> None:
    h = RoundHarness(workers=0, register=False)
    first = h.submit("first", replicas=40, priority=PriorityBand.BATCH, wait_for_capacity=True)
    second = h.submit("second", replicas=2, priority=PriorityBand.PRODUCTION, wait_for_capacity=True)
    jobs = considered(h, limit=100)
    assert sorted(jobs) == sorted([first] * 40 + [second] * 2)


def test_over_a_hundred_thousand_unplaceable_tasks_a_later_job_that_fits_starts_in_one_round() -> None:
    h = RoundHarness(workers=1, cpu=4)
    stuck = [
        h.submit(f"stuck-{i}", replicas=60_000, cpu=64, priority=PriorityBand.BATCH, wait_for_capacity=True)
        for i in range(2)
    ]
    fits = h.submit("fits", replicas=1, cpu=1, priority=PriorityBand.BATCH)
    h.step()
    assert h.task_states(fits)[0] is not TaskState.PENDING  # placed in the first round
    assert all(h.task_states(job)[0] is TaskState.PENDING for job in stuck)
