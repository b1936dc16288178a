"""The scheduling pass's named stages (kernel.STAGES), each on its own, and their timings."""

from __future__ import annotations

from iris.cluster.controller.scheduler import ReasonCode, schedule
from iris.cluster.controller.scheduler.fleet import Fleet
from iris.cluster.controller.scheduler.kernel import STAGES, explain_pending, order, place_task, reclaim
from iris.cluster.controller.scheduler.preemption import Reclaimer

from .scheduler_helpers import BATCH, INTER, PROD, gang, occupied, running, task, worker


def test_order_puts_bands_first_and_gangs_whole() -> None:
    pending = [task("/a/batch/0", band=BATCH), *gang("/a/g", 2), task("/a/prod/0", band=PROD)]
    units = order(pending)
    heads = [u.head.task_id if hasattr(u, "head") else u.task_id for u in units]
    assert heads == ["/a/prod/0", "/a/g/0", "/a/batch/0"]


def test_place_takes_a_worker_of_the_tasks_shape_or_says_none() -> None:
    fleet = Fleet([worker("w0", cpu=2)])
    assert place_task(task("/a/j/0", cpu=2), fleet)[0] == 0
    i, shape = place_task(task("/a/j/1", cpu=1), fleet)
    assert i == -1 and shape.feasible  # it could fit there, but the room is taken


def test_reclaim_preempts_lower_band_work_and_says_so() -> None:
    run = [running("/b/low/0", "w0", 2, band=BATCH)]
    fleet = Fleet(occupied([worker("w0", cpu=2)], run))
    reclaimer = Reclaimer(fleet, run, True)
    hi = task("/a/hi/0", cpu=2, band=PROD)
    i, shape = place_task(hi, fleet)
    assert i == -1
    preemptions: list = []
    code, message = reclaim(hi, shape, reclaimer, preemptions)
    assert code == ReasonCode.PREEMPTING and [p.victim_task_id for p in preemptions] == ["/b/low/0"]
    same_band = task("/a/other/0", cpu=2, band=BATCH)
    assert reclaim(same_band, fleet.shape_for(same_band), reclaimer, []) is None  # never its own band


def test_explain_gives_every_waiting_task_a_reason_and_its_place_in_line() -> None:
    fleet = Fleet([worker("w0", cpu=1)])
    a, b = task("/a/j/0", cpu=4), task("/a/j/1", cpu=4, band=INTER)
    reasons = explain_pending(fleet, [(a, fleet.shape_for(a)), (b, fleet.shape_for(b))], 100)
    assert reasons["/a/j/0"].code == ReasonCode.EXCEEDS_CAPACITY
    assert [reasons[t].position for t in ("/a/j/0", "/a/j/1")] == [1, 2]


def test_a_pass_times_every_stage() -> None:
    result = schedule([task("/a/j/0"), task("/a/j/1", cpu=64)], [worker("w0", cpu=2)], [])
    assert set(result.stage_seconds) == set(STAGES) == {"order", "gate", "place", "reclaim", "explain"}
    assert all(seconds >= 0 for seconds in result.stage_seconds.values())
