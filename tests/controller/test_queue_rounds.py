"""The pending queue in real rounds: a pass reads new work and room that grew, not the backlog.

On the deterministic harness (the real controller, store and kernels, a fake clock and an
in-memory fleet). ``plan.submitted_at`` names every pending task a pass read.
"""

from __future__ import annotations

from iris.rpc.enums import JobState, TaskState
from iris.testing.round_harness import RoundHarness

S = TaskState


def backlog(h: RoundHarness, replicas: int = 50) -> str:
    """A job no worker can ever fit (it waits for capacity), parked after one round."""
    job = h.submit("backlog", replicas=replicas, cpu=16, wait_for_capacity=True)
    h.step()
    assert h.task_states(job) == [S.PENDING] * replicas
    return job


def test_a_parked_backlog_is_not_read_again_while_nothing_changes() -> None:
    h = RoundHarness(workers=1, cpu=2)
    job = backlog(h)
    plan = h.controller.plan_round()
    assert plan.submitted_at == {}, "a quiet round reads no pending task"
    h.controller.apply_round(plan)
    assert len(h.controller.last_unplaced) == 50  # still the autoscaler's demand
    small = h.submit("small")
    plan = h.controller.plan_round()
    assert set(plan.submitted_at) == {f"{small}/0"}, "only the new job is read"
    h.controller.apply_round(plan)
    h.step()
    assert h.task(small).state is S.RUNNING
    assert h.task_states(job) == [S.PENDING] * 50


def test_room_freed_by_a_finished_task_brings_parked_work_back_at_once() -> None:
    h = RoundHarness(workers=1, cpu=1)
    first = h.submit("first")
    h.step()
    second = h.submit("second")
    h.step()
    assert h.task(second).state is S.PENDING  # parked: the only CPU is taken
    h.fleet.finish(h.current_uid(first))
    h.step(rounds=2, seconds=0.1)  # far less than the queue's backoff: the freed room did it
    assert h.job_state(first) is JobState.SUCCEEDED
    assert h.task(second).state is S.RUNNING


def test_a_stopped_parked_job_leaves_the_demand_at_once() -> None:
    h = RoundHarness(workers=1, cpu=2)
    job = backlog(h, replicas=5)
    assert {r.job_id for r in h.controller.last_unplaced} == {job}
    assert h.controller.stop_job(job) is JobState.KILLED
    assert h.controller.last_unplaced == []
    h.step()
    assert h.controller.last_unplaced == []


def test_a_job_submitted_while_a_pass_runs_is_placed_by_the_next_round() -> None:
    h = RoundHarness(workers=1, cpu=4)
    early = h.submit("early")
    plan = h.controller.plan_round()
    late = h.submit("late")  # lands between the pass's snapshot and its commit
    h.controller.apply_round(plan)
    assert h.task(early).state is S.ASSIGNED and h.task(late).state is S.PENDING
    h.step(seconds=0.1)
    assert h.task(late).state is S.RUNNING


def test_a_placement_that_a_reap_overtook_is_placed_again_next_round() -> None:
    h = RoundHarness(workers=2, cpu=1)
    job = h.submit("moved")
    plan = h.controller.plan_round()
    ((_, worker_id),) = [(c.writes[0].task_id, c.writes[0].worker_id) for c in plan.effects.changes]
    h.controller.reap_worker(worker_id, "its machine vanished")
    h.controller.apply_round(plan)
    assert h.task(job).state is S.PENDING and h.task(job).attempts == ()
    h.step(seconds=0.1)
    (uid, state, placed_on) = h.task(job).attempts[0]
    assert state is S.RUNNING and placed_on not in (None, worker_id)
    assert [s.worker_id for s in h.fleet.runs_sent() if s.attempt_uid == uid] == [placed_on]


def test_a_retry_is_new_work_for_the_next_pass() -> None:
    h = RoundHarness(workers=1, cpu=2)
    backlog(h)
    job = h.submit("flaky", max_retries_failure=1)
    h.step()
    h.fleet.finish(h.current_uid(job), exit_code=1, error="exit code 1")
    h.step(seconds=0.1)  # folded in: PENDING again
    plan = h.controller.plan_round()
    assert set(plan.submitted_at) <= {f"{job}/0"}, "the retry alone, not the backlog"
    h.controller.apply_round(plan)
    h.step(seconds=0.1)
    assert h.task(job).state is S.RUNNING and len(h.task(job).attempts) == 2
