"""What one transaction's commits tell the rest of the controller, gathered commit by commit
(``CommitNews``): the last commit has the last word on a task, and a batch of submits is told
once, after COMMIT."""

from __future__ import annotations

import pytest

from iris.cluster.controller import store
from iris.cluster.controller.commit_news import CommitNews
from iris.cluster.controller.effects import Applied, Assign, Change, MoveTask
from iris.cluster.controller.task_state import TaskSnapshot
from iris.rpc.enums import JobState, TaskState
from iris.rpc.errors import AlreadyExists
from iris.rpc.models import Entrypoint, JobSpec, ResourceSpec
from iris.testing.round_harness import RoundHarness


def _task(state: TaskState) -> TaskSnapshot:
    return TaskSnapshot("/u/j/0", state, "a1", version=3)


def _applied(*writes: MoveTask | Assign, dropped: tuple[Assign, ...] = ()) -> Applied:
    return Applied(changes=[Change((w,)) for w in writes], dropped=[Change((w,)) for w in dropped])


def test_the_last_commit_of_a_transaction_has_the_last_word_on_a_task() -> None:
    retried = MoveTask(_task(TaskState.RUNNING), _task(TaskState.PENDING))
    killed = MoveTask(_task(TaskState.PENDING), _task(TaskState.KILLED))
    news = CommitNews()
    news.add(_applied(retried))
    news.add(_applied(killed))
    assert news.queue_news() == ([], [], ["/u/j/0"]), "a task retried, then killed, is not pending"
    news = CommitNews()
    news.add(_applied(Assign("/u/j/0", "/u/j", 3, "w1")))
    news.add(_applied(retried))
    assert news.queue_news() == ([], ["/u/j/0"], [])


def test_an_overtaken_placement_is_pending_again_and_moves_worth_a_line_are_kept() -> None:
    news = CommitNews()
    news.add(_applied(dropped=(Assign("/u/j/0", "/u/j", 3, "w1"),)))
    assert news.queue_news() == ([], ["/u/j/0"], [])
    failed = MoveTask(_task(TaskState.RUNNING), _task(TaskState.FAILED))
    news.add(_applied(failed))
    assert news.moves == [failed]
    assert news.dropped == 1


def _spec(name: str) -> JobSpec:
    return JobSpec(
        name=name,
        user="story",
        entrypoint=Entrypoint.from_command("true"),
        resources=ResourceSpec(cpu=1, memory="64MB"),
    )


def test_a_batch_of_submits_is_told_once_after_commit_and_every_job_runs() -> None:
    h = RoundHarness()
    c = h.controller
    told: list[tuple[list[str], list[str], list[str]]] = []
    committed = c.loop.committed
    c.loop.committed = lambda news: (told.append(news.queue_news()), committed(news))  # type: ignore[method-assign]
    jobs = c.submit_many([_spec(f"b{i}") for i in range(5)])
    assert len(told) == 1 and told[0][0] == jobs
    h.step()
    assert all(h.job_state(job) is JobState.RUNNING for job in jobs)


def test_a_batch_reads_its_own_earlier_jobs() -> None:
    """The batch's inserts are committed together, but a job that names an earlier one of the same
    batch (as its parent, or by its own name) sees it."""
    h = RoundHarness()
    c = h.controller
    kept = c.submit_many([_spec("same"), _spec("same").model_copy(update={"existing_job_policy": "keep"})])
    assert kept == ["/story/same", "/story/same"]
    child = _spec("child").model_copy(update={"parent_job_id": "/story/tree"})
    jobs = c.submit_many([_spec("tree"), child, _spec("other")])
    assert jobs == ["/story/tree", "/story/tree/child", "/story/other"]
    with c.db.read() as cur:
        rows = {job_id: store.get_job(cur, job_id) for job_id in ["/story/same", *jobs]}
    assert all(rows.values())
    assert rows["/story/tree/child"].parent_job_id == "/story/tree"  # type: ignore[union-attr]
    with pytest.raises(AlreadyExists):
        c.submit_many([_spec("twice"), _spec("twice")])
    with c.db.read() as cur:
        assert store.get_job(cur, "/story/twice") is None
