"""Short scenario stories on the deterministic harness: the real controller, store and kernels,
a fake clock and an in-memory fleet, stepped round by round."""

from __future__ import annotations

import base64
import json
from pathlib import Path

from iris.cluster.controller.auth import Authenticator, StaticToken
from iris.cluster.controller.backend import BackendKind
from iris.rpc.enums import JobState, PriorityBand, TaskState
from iris.rpc.models import CoschedulingConfig
from iris.testing.round_harness import FakeClock, RoundHarness

S = TaskState


def test_submit_run_succeed() -> None:
    h = RoundHarness()
    job = h.submit("hello")
    h.step()
    uid = h.current_uid(job)
    assert [s.intent for s in h.fleet.sent if s.attempt_uid == uid] == ["run"]
    assert h.task_states(job) == [S.RUNNING] and h.job_state(job) is JobState.RUNNING
    h.fleet.finish(uid)
    h.step()
    assert h.task_states(job) == [S.SUCCEEDED]
    assert h.job_state(job) is JobState.SUCCEEDED
    assert h.events(job)[0] == "job_submitted" and h.events(job)[-1] == "job_succeeded"


def test_failure_is_retried_within_its_budget() -> None:
    h = RoundHarness()
    job = h.submit("flaky", max_retries_failure=1)
    h.step()
    h.fleet.finish(h.current_uid(job), exit_code=3, error="exit code 3")
    h.step()  # the failure is folded in: PENDING again, retry placed in the same or the next round
    h.step()
    h.fleet.finish(h.current_uid(job))
    h.step()
    task = h.task(job)
    assert [state for _, state, _ in task.attempts] == [S.FAILED, S.SUCCEEDED]
    assert h.job_state(job) is JobState.SUCCEEDED


def test_every_attempt_gets_its_own_spec_and_a_retry_long_after_gets_a_fresh_job_token() -> None:
    clock = FakeClock()  # the job tokens' expiry runs on the harness's clock
    auth = Authenticator([StaticToken("admin-secret", "admin")], secret=b"s", clock=clock)
    h = RoundHarness(workers=1, clock=clock, auth=auth)
    job = h.submit("pair", replicas=2, max_retries_failure=1)
    h.step()
    first = {s.spec.task_id: s.spec for s in h.fleet.sent if s.spec is not None}
    assert sorted(first) == [f"{job}/0", f"{job}/1"]
    for task_id, spec in first.items():
        assert spec.task_index == int(task_id.rsplit("/", 1)[1]) and spec.attempt_number == 0
        assert spec.attempt_uid == h.task(job, spec.task_index).attempts[0][0] and spec.user == "story"
    h.clock.advance(2 * 3600)  # past the age at which a job's run template is rebuilt
    h.fleet.finish(first[f"{job}/0"].attempt_uid, exit_code=3, error="exit code 3")
    h.step(2)
    (retry,) = [s.spec for s in h.fleet.sent if s.spec is not None and s.spec.attempt_number == 1]
    assert retry.task_id == f"{job}/0" and retry.attempt_uid == h.task(job, 0).attempts[1][0]
    assert _token_expiry(retry.env["IRIS_TOKEN"]) >= _token_expiry(first[f"{job}/0"].env["IRIS_TOKEN"]) + 3600


def _token_expiry(token: str) -> float:
    payload = token.split(".")[1]
    return float(json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))["exp"])


def test_a_lost_worker_is_reaped_and_its_task_retries_elsewhere() -> None:
    h = RoundHarness(workers=2)
    job = h.submit("survivor")
    h.step()
    (uid, _, first_worker) = h.task(job).attempts[0]
    assert first_worker is not None
    h.fleet.unreachable.add(first_worker)
    h.step(rounds=25, seconds=1.0)  # past the 10 s grace
    task = h.task(job)
    assert task.attempts[0][1] is S.WORKER_FAILED
    assert task.attempts[-1][2] not in (None, first_worker)
    assert task.state is S.RUNNING
    h.fleet.finish(h.current_uid(job))
    h.step()
    assert h.job_state(job) is JobState.SUCCEEDED


def test_a_stop_between_the_rounds_snapshot_and_its_commit_wins() -> None:
    """The lost kill: the scheduler decided from PENDING, the stop landed before the commit."""
    h = RoundHarness()
    job = h.submit("doomed")
    plan = h.controller.plan_round()
    assert plan.effects.changes, "the round decided to place the task"
    assert h.controller.stop_job(job) is JobState.KILLED
    h.controller.apply_round(plan)
    assert h.job_state(job) is JobState.KILLED
    assert h.task(job).state is S.KILLED and h.task(job).attempts == ()
    assert h.controller.round_stats["dropped_changes"] >= 1
    h.step(rounds=3)
    assert h.task(job).state is S.KILLED
    assert h.fleet.runs_sent() == []


def test_a_worker_reaped_between_the_rounds_snapshot_and_its_commit_gets_nothing() -> None:
    h = RoundHarness(workers=1)
    job = h.submit("orphan")
    plan = h.controller.plan_round()
    assert plan.effects.changes
    h.controller.reap_worker("w0", "its machine vanished")
    h.controller.apply_round(plan)
    assert h.task(job).attempts == () and h.task(job).state is S.PENDING
    h.step(rounds=3)
    assert h.fleet.runs_sent() == []
    assert h.task(job).state is S.PENDING


def test_kill_during_run_stops_the_attempt() -> None:
    h = RoundHarness()
    job = h.submit("long")
    h.step()
    uid = h.current_uid(job)
    assert h.controller.stop_job(job) is JobState.KILLED
    assert h.task(job).state is S.KILLED
    h.step()
    assert [s.intent for s in h.fleet.sent if s.attempt_uid == uid] == ["run", "stop"]
    assert h.fleet.attempts[uid].state is S.KILLED
    h.step()
    assert h.task(job).attempts[0][1] is S.KILLED
    intents = [s.intent for s in h.fleet.sent if s.attempt_uid == uid]
    assert intents[0] == "run" and set(intents[1:]) == {"stop"}, "never asked to run again"


def test_a_gang_bounces_together_when_one_member_is_lost() -> None:
    h = RoundHarness(workers=2, cpu=1, attributes={"pool": "a"})
    job = h.submit("gang", replicas=2, coscheduling=CoschedulingConfig(group_by="pool"))
    h.step()
    assert h.task_states(job) == [S.RUNNING, S.RUNNING]
    first = [h.current_uid(job, 0), h.current_uid(job, 1)]
    h.fleet.lose(first[0])  # the worker no longer knows it: MISSING -> retry, the sibling bounces
    h.step(rounds=3)
    tasks = h.tasks(job)
    assert tasks[0].attempts[0][1] is S.WORKER_FAILED
    assert tasks[1].attempts[0][1] is S.COSCHED_FAILED
    assert all(len(t.attempts) == 2 for t in tasks), "both members were placed again, together"
    assert h.task_states(job) == [S.RUNNING, S.RUNNING]


def test_preemption_makes_room_for_higher_band_work() -> None:
    h = RoundHarness(workers=1, cpu=1)
    low = h.submit("batch", priority=PriorityBand.BATCH)
    h.step()
    victim = h.current_uid(low)
    high = h.submit("prod", priority=PriorityBand.PRODUCTION)
    h.step(rounds=3)
    assert h.task(low).attempts[0][1] is S.PREEMPTED
    assert [s.intent for s in h.fleet.sent if s.attempt_uid == victim][-1] == "stop"
    assert h.task(high).state is S.RUNNING
    assert h.task(low).state is S.PENDING  # waits for the higher band to finish


def test_scheduling_timeout_makes_an_unfittable_job_unschedulable() -> None:
    h = RoundHarness(workers=1, cpu=1)
    job = h.submit("huge", cpu=100, scheduling_timeout_s=5, wait_for_capacity=True)
    h.step()
    assert h.task(job).state is S.PENDING
    h.step(rounds=3, seconds=2.0)
    assert h.task(job).state is S.UNSCHEDULABLE
    assert h.job_state(job) is JobState.UNSCHEDULABLE
    assert "scheduling timeout" in (h.job_error(job) or "")


def test_execution_timeout_fails_the_task_and_stops_its_attempt() -> None:
    h = RoundHarness()
    job = h.submit("slow", timeout_s=5, max_retries_failure=3)
    h.step()
    uid = h.current_uid(job)
    h.step(rounds=4, seconds=2.0)
    task = h.task(job)
    assert task.state is S.FAILED and "timed out after 5s" in (task.error or "")
    assert len(task.attempts) == 1, "a timeout is not retried"
    assert [s.intent for s in h.fleet.sent if s.attempt_uid == uid][-1] == "stop"
    assert h.job_state(job) is JobState.FAILED


def test_a_controller_restarted_mid_round_loses_nothing_and_runs_nothing_twice(tmp_path: Path) -> None:
    h = RoundHarness(state_dir=tmp_path)
    job = h.submit("durable", replicas=2)
    h.controller.plan_round()  # decided, never committed: the process dies here
    h.restart()
    h.step()
    assert h.task_states(job) == [S.RUNNING, S.RUNNING]
    h.restart()  # and again, with attempts live on the fleet
    h.step()
    for uid in [h.current_uid(job, 0), h.current_uid(job, 1)]:
        h.fleet.finish(uid)
    h.step()
    assert h.job_state(job) is JobState.SUCCEEDED
    assert all(len(t.attempts) == 1 for t in h.tasks(job))
    assert len({s.attempt_uid for s in h.fleet.runs_sent()}) == 2


def test_kubernetes_dispatch_gives_every_pending_task_an_attempt() -> None:
    h = RoundHarness(kind=BackendKind.KUBERNETES)
    job = h.submit("pods", replicas=3)
    plan = h.controller.plan_round()
    h.controller.stop_job(job)
    h.controller.apply_round(plan)
    assert h.task_states(job) == [S.KILLED] * 3 and h.fleet.runs_sent() == []
    other = h.submit("pods2", replicas=2)
    h.step()
    assert h.task_states(other) == [S.RUNNING, S.RUNNING]
    assert {s.worker_id for s in h.fleet.runs_sent()} == {None}
