"""Preemption: strictly lower bands only, cheapest victims, preemptor placed in a later pass."""

from __future__ import annotations

import pytest
from tests.controller.scheduler.scheduler_helpers import (
    BATCH,
    INTER,
    PROD,
    con,
    gang,
    occupied,
    running,
    task,
    worker,
)

from iris.cluster.controller.scheduler import Preemption, schedule


def victims(result) -> set[str]:
    return {p.victim_task_id for p in result.preemptions}


@pytest.mark.parametrize(
    ("pending_band", "running_band", "preempts"),
    [
        (PROD, BATCH, True),
        (PROD, INTER, True),
        (INTER, BATCH, True),
        (PROD, PROD, False),
        (INTER, INTER, False),
        (BATCH, BATCH, False),
        (INTER, PROD, False),
        (BATCH, INTER, False),
    ],
)
def test_only_strictly_lower_bands_are_preempted(pending_band, running_band, preempts):
    held = [running("/v/j/0", "w", cpu=4, band=running_band)]
    workers = occupied([worker("w", cpu=4)], held)
    result = schedule([task("/u/j/0", cpu=2, band=pending_band)], workers, held)
    assert result.assignments == []
    if preempts:
        assert result.preemptions == [Preemption("/v/j/0", "w", "/u/j/0")]
        assert result.pending["/u/j/0"].code == "preempting"
        assert result.pending["/u/j/0"].message == (
            "preempting 1 lower-priority task on w (/v/j/0); it will place once they exit"
        )
    else:
        assert result.preemptions == []
        assert result.pending["/u/j/0"].code == "resources"


def test_preemptor_is_not_assigned_in_the_same_pass_even_if_it_would_fit_after():
    held = [running("/v/j/0", "w", cpu=4)]
    workers = occupied([worker("w", cpu=4)], held)
    result = schedule([task("/u/j/0", cpu=4, band=PROD)], workers, held)
    assert result.assignments == []
    assert victims(result) == {"/v/j/0"}


def test_lowest_band_first_then_youngest():
    held = [
        running("/inter/j/0", "w", cpu=1, band=INTER, started_at=9),
        running("/batch/old/0", "w", cpu=1, band=BATCH, started_at=1),
        running("/batch/young/0", "w", cpu=1, band=BATCH, started_at=5),
    ]
    workers = occupied([worker("w", cpu=3)], held)
    one = schedule([task("/u/j/0", cpu=1, band=PROD)], workers, held)
    assert victims(one) == {"/batch/young/0"}
    two = schedule([task("/u/j/0", cpu=2, band=PROD)], workers, held)
    assert victims(two) == {"/batch/young/0", "/batch/old/0"}
    three = schedule([task("/u/j/0", cpu=3, band=PROD)], workers, held)
    assert victims(three) == {"/batch/young/0", "/batch/old/0", "/inter/j/0"}


def test_unneeded_victims_are_spared():
    held = [
        running("/batch/small/0", "w", cpu=1, started_at=9),  # youngest: tried first
        running("/batch/large/0", "w", cpu=3, started_at=1),
    ]
    workers = occupied([worker("w", cpu=4)], held)
    result = schedule([task("/u/j/0", cpu=3, band=PROD)], workers, held)
    assert victims(result) == {"/batch/large/0"}


def test_picks_the_worker_with_the_cheapest_victims():
    held = [
        running("/inter/j/0", "w-inter", cpu=4, band=INTER),
        running("/batch/j/0", "w-batch", cpu=4, band=BATCH),
    ]
    workers = occupied([worker("w-inter", cpu=4), worker("w-batch", cpu=4)], held)
    result = schedule([task("/u/j/0", cpu=4, band=PROD)], workers, held)
    assert result.preemptions == [Preemption("/batch/j/0", "w-batch", "/u/j/0")]


def test_preempts_only_on_workers_meeting_the_constraints():
    held = [running("/batch/a/0", "a", cpu=4), running("/batch/b/0", "b", cpu=4)]
    workers = occupied(
        [worker("a", cpu=4, attrs={"zone": "a"}), worker("b", cpu=4, attrs={"zone": "b"})], held
    )
    result = schedule(
        [task("/u/j/0", cpu=4, band=PROD, constraints=(con("zone", "EQ", "b"),))], workers, held
    )
    assert victims(result) == {"/batch/b/0"}


def test_never_preempts_for_a_task_that_could_never_fit():
    held = [running("/batch/j/0", "w", cpu=4)]
    workers = occupied([worker("w", cpu=4)], held)
    result = schedule([task("/u/j/0", cpu=8, band=PROD)], workers, held)
    assert result.preemptions == []
    assert result.pending["/u/j/0"].code == "exceeds_capacity"


def test_freed_capacity_is_promised_to_the_preemptor_for_the_rest_of_the_pass():
    held = [running("/batch/j/0", "w", cpu=2)]
    workers = occupied([worker("w", cpu=4)], held)  # 2 cpu free now
    tasks = [task("/u/prod/0", cpu=4, band=PROD), task("/u/batch/0", cpu=2, band=BATCH)]
    result = schedule(tasks, workers, held)
    assert victims(result) == {"/batch/j/0"}
    assert result.assignments == [], "the lower-band task must not take the free half the preemptor counts on"


def test_two_preemptors_do_not_share_victims():
    held = [running("/batch/a/0", "w", cpu=2), running("/batch/b/0", "w", cpu=2)]
    workers = occupied([worker("w", cpu=4)], held)
    tasks = [
        task("/u/p/0", cpu=2, band=PROD),
        task("/u/p/1", cpu=2, band=PROD),
        task("/u/p/2", cpu=2, band=PROD),
    ]
    result = schedule(tasks, workers, held)
    by_preemptor = {p.preemptor_task_id: p.victim_task_id for p in result.preemptions}
    assert sorted(by_preemptor) == ["/u/p/0", "/u/p/1"]
    assert sorted(by_preemptor.values()) == ["/batch/a/0", "/batch/b/0"]
    assert result.pending["/u/p/2"].code == "resources"


def test_stopping_tasks_are_waited_for_not_preempted_again():
    held = [running("/batch/j/0", "w", cpu=4, stopping=True), running("/batch/k/0", "x", cpu=4)]
    workers = occupied([worker("w", cpu=4), worker("x", cpu=4)], held)
    result = schedule([task("/u/j/0", cpu=4, band=PROD)], workers, held)
    assert result.preemptions == []
    assert result.pending["/u/j/0"].code == "preempting"
    assert result.pending["/u/j/0"].message == "waiting for 1 stopping task on w to exit (/batch/j/0)"


def test_stopping_capacity_is_waited_for_even_without_preemption():
    held = [running("/inter/j/0", "w", cpu=4, band=INTER, stopping=True)]
    workers = occupied([worker("w", cpu=4)], held)
    tasks = [task("/u/first/0", cpu=4), task("/u/second/0", cpu=4)]
    result = schedule(tasks, workers, held, allow_preemption=False)
    assert result.preemptions == []
    assert result.pending["/u/first/0"].code == "preempting"
    assert result.pending["/u/second/0"].code == "resources"


def test_allow_preemption_false_preempts_nothing():
    held = [running("/batch/j/0", "w", cpu=4)]
    workers = occupied([worker("w", cpu=4)], held)
    result = schedule([task("/u/j/0", cpu=4, band=PROD)], workers, held, allow_preemption=False)
    assert result.preemptions == []
    assert result.pending["/u/j/0"].code == "resources"


def test_a_single_task_never_tears_down_a_running_gang():
    held = [running("/batch/g/0", "w", cpu=4, group_by="tpu-name")]
    workers = occupied([worker("w", cpu=4, attrs={"tpu-name": "a"})], held)
    result = schedule([task("/u/j/0", cpu=4, band=PROD)], workers, held)
    assert result.preemptions == []


def test_a_gang_preempts_on_enough_workers_of_one_group():
    slice_a = [worker(f"a-{i}", cpu=4, attrs={"tpu-name": "a"}) for i in range(2)]
    held = [running(f"/batch/j{i}/0", f"a-{i}", cpu=4) for i in range(2)]
    result = schedule(gang("/u/g", 2, cpu=4, band=PROD), occupied(slice_a, held), held)
    assert result.assignments == []
    assert sorted((p.victim_task_id, p.preemptor_task_id) for p in result.preemptions) == [
        ("/batch/j0/0", "/u/g/0"),
        ("/batch/j1/0", "/u/g/1"),
    ]
    assert result.pending["/u/g/0"].message == (
        "preempting 2 lower-priority tasks on workers with tpu-name=a (/batch/j0/0, /batch/j1/0); "
        "it will place once they exit"
    )


def test_a_gang_preempting_a_gang_member_takes_down_the_whole_victim_gang():
    slice_a = [worker(f"a-{i}", cpu=4, attrs={"tpu-name": "a"}) for i in range(2)]
    held = [running(f"/batch/g/{i}", f"a-{i}", cpu=4, group_by="tpu-name") for i in range(2)]
    result = schedule(gang("/u/g", 1, cpu=4, band=PROD), occupied(slice_a, held), held)
    assert victims(result) == {"/batch/g/0", "/batch/g/1"}


def test_a_gang_does_not_preempt_a_gang_with_any_member_in_its_band():
    slice_a = [worker(f"a-{i}", cpu=4, attrs={"tpu-name": "a"}) for i in range(2)]
    held = [
        running("/mixed/g/0", "a-0", cpu=4, band=BATCH, group_by="tpu-name"),
        running("/mixed/g/1", "a-1", cpu=4, band=PROD, group_by="tpu-name"),
    ]
    result = schedule(gang("/u/g", 1, cpu=4, band=PROD), occupied(slice_a, held), held)
    assert result.preemptions == []


def test_no_preemption_onto_unschedulable_workers():
    held = [running("/batch/j/0", "w", cpu=4)]
    workers = occupied([worker("w", cpu=4, schedulable=False)], held)
    result = schedule([task("/u/j/0", cpu=4, band=PROD)], workers, held)
    assert result.preemptions == []
