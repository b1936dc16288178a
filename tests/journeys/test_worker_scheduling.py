"""Journeys that need the Iris scheduler (WORKER backend): gangs by attribute, preemption, dry runs."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from tests.journeys.harness import Journey, journey_cluster, run_bouncing_gang
from tests.journeys.test_job_model import SMALL, finished

from iris.client import Entrypoint, JobState, PriorityBand, ResourceSpec, TaskState


@pytest.fixture(scope="module")
def j() -> Iterator[Journey]:
    with journey_cluster("worker", attributes=[{"pool": "a"}, {"pool": "a"}, {"pool": "b"}]) as journey:
        yield journey


def test_gang_lands_together_and_bounces_together(j: Journey) -> None:
    detail = run_bouncing_gang(j, "gang", ResourceSpec(cpu=1, memory="64MB"))
    assert detail.state is JobState.SUCCEEDED
    pool = {w.worker_id: w.attributes.get("pool") for w in j.client.workers().workers}
    for attempt_index in (0, 1):
        placed = [t.attempts[attempt_index].worker_id for t in detail.tasks]
        assert len(set(placed)) == 2
        assert {pool[w] for w in placed} == {"a"}


def test_production_preempts_batch_which_later_completes(j: Journey) -> None:
    batch = j.client.submit(
        Entrypoint.from_command("sleep", "2"),
        name="batch",
        replicas=3,
        priority=PriorityBand.BATCH,
        resources=ResourceSpec(cpu=2, memory="64MB"),
    )
    j.step(
        lambda: sum(t.state is TaskState.RUNNING for t in batch.tasks()) == 3, what="batch fills the cluster"
    )
    prod = j.client.submit(
        Entrypoint.from_command("true"),
        name="prod",
        priority=PriorityBand.PRODUCTION,
        resources=ResourceSpec(cpu=2, memory="64MB"),
    )
    prod_detail = j.step(lambda: finished(j, prod), what="production job done")
    assert prod_detail.state is JobState.SUCCEEDED
    batch_detail = j.step(lambda: finished(j, batch), what="batch job done")
    assert batch_detail.state is JobState.SUCCEEDED
    preempted = [t for t in batch_detail.tasks if t.attempts[0].state is TaskState.PREEMPTED]
    assert len(preempted) == 1
    assert preempted[0].preemption_count == 1
    assert preempted[0].attempts[-1].state is TaskState.SUCCEEDED


def test_dry_run_says_where_a_job_would_go(j: Journey) -> None:
    fits = j.client.dry_run(Entrypoint.from_command("true"), name="probe", resources=SMALL, replicas=2)
    assert fits.would_place and len(fits.placements) == 2
    nope = j.client.dry_run(Entrypoint.from_command("true"), name="probe", resources=ResourceSpec(cpu=64))
    assert not nope.would_place and "cpu" in nope.summary
    assert j.client.list_jobs(limit=1000).total == len(
        {job.job_id for job in j.client.list_jobs(limit=1000).jobs}
    )
    assert all("probe" not in job.job_id for job in j.client.list_jobs(limit=1000).jobs)
