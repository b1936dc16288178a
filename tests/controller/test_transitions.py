"""The transition table holds: every task edge the kernels produce is listed, and no terminal
state is ever left, for random observations and for random event sequences on the harness."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from iris.cluster.controller import store
from iris.cluster.controller.effects import Applied, Change, Effects, MoveTask
from iris.cluster.controller.task_state import AttemptSnapshot, TaskSnapshot, apply_observation
from iris.cluster.controller.transitions import TASK_TRANSITIONS, edge_allowed
from iris.rpc.enums import ACTIVE_TASK_STATES, TERMINAL_TASK_STATES, JobState, PriorityBand, TaskState
from iris.rpc.models import AttemptObservation, CoschedulingConfig
from iris.testing.round_harness import RoundHarness

S = TaskState
STORED = [s for s in TaskState if s is not S.MISSING]


def test_no_edge_leaves_a_terminal_state_and_none_enters_pending_from_pending() -> None:
    for before, after in TASK_TRANSITIONS:
        assert before not in TERMINAL_TASK_STATES, (before, after)
        assert before is not after
    for state in TERMINAL_TASK_STATES:
        assert not edge_allowed(state, state)


@given(
    task_state=st.sampled_from(STORED),
    attempt_state=st.sampled_from(STORED),
    observed=st.sampled_from(list(TaskState)),
    released=st.booleans(),
    current=st.booleans(),
    failures=st.integers(0, 2),
    preemptions=st.integers(0, 2),
    max_failures=st.integers(0, 2),
    max_preemptions=st.integers(0, 2),
)
def test_apply_observation_produces_only_listed_edges(
    task_state: TaskState,
    attempt_state: TaskState,
    observed: TaskState,
    released: bool,
    current: bool,
    failures: int,
    preemptions: int,
    max_failures: int,
    max_preemptions: int,
) -> None:
    # Reachable pairs only: attempts start ASSIGNED, and a live task mirrors its current attempt.
    assume(attempt_state is not S.PENDING)
    assume(not (current and task_state in ACTIVE_TASK_STATES and attempt_state is not task_state))
    task = TaskSnapshot(
        task_id="/u/j/0",
        state=task_state,
        current_attempt_uid="a1" if current else "a0",
        failure_count=failures,
        preemption_count=preemptions,
        max_retries_failure=max_failures,
        max_retries_preemption=max_preemptions,
    )
    attempt = AttemptSnapshot(attempt_uid="a1", task_id="/u/j/0", state=attempt_state, released=released)
    tr = apply_observation(task, attempt, AttemptObservation(attempt_uid="a1", state=observed), 5.0)
    if tr.task.state is not task.state:
        assert (task.state, tr.task.state) in TASK_TRANSITIONS
    if task.state in TERMINAL_TASK_STATES:
        assert tr.task == task
    if attempt.state in TERMINAL_TASK_STATES:
        assert tr.attempt.state is attempt.state  # terminal attempts never revive


@pytest.fixture
def edges(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[tuple[TaskState, TaskState]]]:
    """Every task edge any kernel hands to the commit (applied, dropped or refused)."""
    seen: list[tuple[TaskState, TaskState]] = []
    real = store.commit

    def recording(
        cur: sqlite3.Cursor, effects: Effects, now: float, *, read_at: int | None = None
    ) -> Applied:
        for change in effects.changes:
            for w in change.writes:
                if isinstance(w, MoveTask):
                    seen.append((w.before.state, w.after.state))
        return real(cur, effects, now, read_at=read_at)

    monkeypatch.setattr(store, "commit", recording)
    yield seen


EVENTS = st.lists(
    st.tuples(
        st.sampled_from(["submit", "gang", "step", "finish", "fail", "lose", "stop", "unreachable", "wait"]),
        st.integers(0, 7),
    ),
    min_size=5,
    max_size=30,
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(events=EVENTS)
def test_random_events_produce_only_listed_edges_and_never_reopen_a_task(
    edges: list[tuple[TaskState, TaskState]], events: list[tuple[str, int]]
) -> None:
    edges.clear()
    h = RoundHarness(workers=3, cpu=2, attributes={"pool": "a"})
    jobs: list[str] = []
    finished: dict[str, TaskState] = {}
    for n, (kind, pick) in enumerate(events):
        live = h.fleet.live()
        if kind == "submit":
            band = [PriorityBand.BATCH, PriorityBand.INTERACTIVE, PriorityBand.PRODUCTION][pick % 3]
            jobs.append(h.submit(f"j{n}", replicas=1 + pick % 3, priority=band, max_retries_failure=pick % 2))
        elif kind == "gang":
            jobs.append(h.submit(f"g{n}", replicas=2, coscheduling=CoschedulingConfig(group_by="pool")))
        elif kind == "finish" and live:
            h.fleet.finish(live[pick % len(live)].uid)
        elif kind == "fail" and live:
            h.fleet.finish(live[pick % len(live)].uid, exit_code=1, error="boom")
        elif kind == "lose" and live:
            h.fleet.lose(live[pick % len(live)].uid)
        elif kind == "stop" and jobs:
            h.controller.stop_job(jobs[pick % len(jobs)])
        elif kind == "unreachable":
            h.fleet.unreachable ^= {h.worker_ids[pick % len(h.worker_ids)]}
        elif kind == "wait":
            h.step(rounds=3, seconds=4.0)
        h.step()
        for job in jobs:
            for t in h.tasks(job):
                if t.task_id in finished:
                    assert t.state is finished[t.task_id], f"{t.task_id} left {finished[t.task_id]}"
                elif t.state in TERMINAL_TASK_STATES:
                    finished[t.task_id] = t.state
    for before, after in edges:
        assert edge_allowed(before, after), (before, after)
    assert h.controller.round_stats["refused_changes"] == 0
    for job in jobs:
        state = h.job_state(job)
        if state in (JobState.SUCCEEDED, JobState.KILLED):
            assert all(s in TERMINAL_TASK_STATES for s in h.task_states(job))


def test_the_commit_refuses_an_unlisted_edge_and_drops_a_stale_one() -> None:
    h = RoundHarness()
    job = h.submit("edges")
    h.step()
    h.fleet.finish(h.current_uid(job))
    h.step()
    with h.controller.db.read() as cur:
        (task,) = store.task_snapshots(cur, [f"{job}/0"]).values()
    assert task.state is S.SUCCEEDED
    reopen = Change((MoveTask(task, task._replace(state=S.RUNNING)),))
    stale = Change((MoveTask(task._replace(version=task.version - 1), task._replace(error="late")),))
    with h.controller.db.transaction() as cur:
        applied = store.commit(cur, Effects(changes=(reopen, stale)), h.clock())
    assert applied.refused == [reopen] and applied.dropped == [stale] and applied.changes == []
    assert h.task(job).state is S.SUCCEEDED and h.task(job).error is None
