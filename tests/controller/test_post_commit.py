"""A commit's side effects (pending queue, dirty workers, job waiters, spec caches) happen only
after COMMIT: a transaction that rolls back leaves the rest of the controller as it was."""

from __future__ import annotations

import asyncio

import pytest

from iris.cluster.controller import round_kernel as kernel
from iris.cluster.controller import store
from iris.cluster.controller.db import ControllerDB
from iris.cluster.controller.effects import Effects
from iris.cluster.types import Entrypoint
from iris.rpc.enums import JobState, StopReason
from iris.rpc.errors import AlreadyExists
from iris.rpc.models import JobSpec, ResourceSpec
from iris.testing.round_harness import RoundHarness


def _spec(name: str, **extra: object) -> JobSpec:
    return JobSpec(
        name=name,
        user="story",
        entrypoint=Entrypoint.from_command("true"),
        resources=ResourceSpec(cpu=1, memory="64MB"),
        **extra,  # type: ignore[arg-type]
    )


def test_callbacks_run_after_commit_and_never_after_a_rollback(tmp_path) -> None:
    db = ControllerDB(tmp_path / "c.db")
    seen: list[str] = []
    with db.transaction() as cur:
        cur.execute("INSERT INTO meta VALUES ('a', '1')")
        db.after_commit(
            lambda: seen.append(db.connection.execute("SELECT value FROM meta WHERE key='a'").fetchone()[0])
        )
        assert seen == []
    assert seen == ["1"]
    with pytest.raises(RuntimeError, match="boom"), db.transaction() as cur:
        cur.execute("INSERT INTO meta VALUES ('b', '2')")
        db.after_commit(lambda: seen.append("rolled back"))
        raise RuntimeError("boom")
    assert seen == ["1"]
    with pytest.raises(RuntimeError, match="open transaction"):
        db.after_commit(lambda: None)
    db.close()


def test_a_rolled_back_submit_many_leaves_queue_and_caches_as_they_were() -> None:
    h = RoundHarness()
    live = h.submit("live")
    old = h.submit("old")
    h.step()
    assert h.controller.stop_job(old) is JobState.KILLED
    h.step()
    c = h.controller
    c.specs.job_spec(old)  # cached: a replace that commits drops it
    queue = c.loop.queue
    assert queue is not None
    dirty, parked = set(queue.dirty_jobs), dict(queue.parked)
    cached = list(c.specs.specs)
    batch = [
        _spec("parent"),
        _spec("child", parent_job_id="/story/parent"),
        _spec("old", existing_job_policy="replace"),
        _spec("live"),  # still running: the whole batch is refused
    ]
    with pytest.raises(AlreadyExists):
        c.submit_many(batch)
    assert queue.dirty_jobs == dirty and queue.parked == parked, "the queue heard of jobs that do not exist"
    assert list(c.specs.specs) == cached, "a rolled-back batch changed the spec cache"
    with c.db.read() as cur:
        assert store.get_job(cur, "/story/parent") is None
    # the same batch without the duplicate commits, and only then is everything told
    c.submit_many(batch[:3])
    assert {"/story/parent", "/story/parent/child", old} <= queue.dirty_jobs
    assert old not in c.specs.specs
    assert h.job_state(live) is JobState.RUNNING


def test_a_rolled_back_commit_that_ended_a_job_wakes_no_waiter() -> None:
    h = RoundHarness()
    job = h.submit("waited")
    h.step()
    c = h.controller

    async def scenario() -> None:
        future = c.job_waiters.add(job)
        now = h.clock()
        with pytest.raises(RuntimeError, match="abandoned"), c.db.transaction() as cur:
            (snap,) = store.job_snapshots(cur, [job])
            change = kernel.terminate_job(snap, JobState.KILLED, "x", StopReason.CANCELLED, now)
            applied = c.commit(cur, Effects(changes=(change,)), now)
            assert job in applied.finished_jobs
            raise RuntimeError("abandoned")
        await asyncio.sleep(0.01)
        assert not future.done(), "a waiter was woken by a job end that rolled back"
        assert h.job_state(job) is JobState.RUNNING
        c.stop_job(job)
        await asyncio.wait_for(future, timeout=5)

    asyncio.run(scenario())
