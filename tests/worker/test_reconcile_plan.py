"""The worker-side reconcile kernel: tables of cases plus properties over random desired sets."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from iris.cluster.worker.reconcile import plan_worker_reconcile
from iris.rpc.enums import StopReason
from iris.rpc.models import DesiredAttempt, Entrypoint, ResourceSpec, RunSpec


def spec(uid: str) -> RunSpec:
    return RunSpec(
        attempt_uid=uid,
        attempt_number=0,
        job_id="/u/j",
        task_id="/u/j/0",
        task_index=0,
        entrypoint=Entrypoint.from_command("true"),
        resources=ResourceSpec(),
    )


def run(uid: str, with_spec: bool = False) -> DesiredAttempt:
    return DesiredAttempt(attempt_uid=uid, intent="run", spec=spec(uid) if with_spec else None)


def stop(uid: str) -> DesiredAttempt:
    return DesiredAttempt(attempt_uid=uid, intent="stop", stop_reason=StopReason.PREEMPTED)


@pytest.mark.parametrize(
    ("desired", "local", "cached", "start", "stop_", "zombies", "missing", "observe"),
    [
        # run, unknown, spec inline -> start
        ([run("a", True)], {}, [], ["a"], [], [], [], ["a"]),
        # run, unknown, spec cached -> start from the cache
        ([run("a")], {}, ["a"], ["a"], [], [], [], ["a"]),
        # run, unknown, no spec -> MISSING
        ([run("a")], {}, [], [], [], [], ["a"], ["a"]),
        # run, known (live or ended) -> no-op
        ([run("a", True)], {"a": False}, [], [], [], [], [], ["a"]),
        ([run("a")], {"a": True}, [], [], [], [], [], ["a"]),
        # stop, live -> kill; stop, ended -> no-op; stop, unknown -> MISSING
        ([stop("a")], {"a": False}, [], [], ["a"], [], [], ["a"]),
        ([stop("a")], {"a": True}, [], [], [], [], [], ["a"]),
        ([stop("a")], {}, [], [], [], [], ["a"], ["a"]),
        # a live attempt not in the set is a zombie, reported after the asked-about ones
        ([run("a")], {"a": False, "z": False, "done": True}, [], [], [], ["z"], [], ["a", "z"]),
        # an empty desired set kills every live attempt
        ([], {"x": False, "y": False}, [], [], [], ["x", "y"], [], ["x", "y"]),
        # duplicates: the first entry wins
        ([run("a", True), stop("a")], {}, [], ["a"], [], [], [], ["a"]),
    ],
)
def test_plan_table(desired, local, cached, start, stop_, zombies, missing, observe) -> None:
    plan = plan_worker_reconcile(desired, local, {uid: spec(uid) for uid in cached})
    assert [s.attempt_uid for s in plan.start] == start
    assert [uid for uid, _ in plan.stop] == stop_
    assert list(plan.zombies) == zombies
    assert list(plan.missing) == missing
    assert list(plan.observe) == observe


def test_inline_specs_are_cached_and_mismatched_specs_rejected() -> None:
    wrong = DesiredAttempt(attempt_uid="a", intent="run", spec=spec("b"))
    plan = plan_worker_reconcile([run("x", True), wrong], {}, {})
    assert [s.attempt_uid for s in plan.cache] == ["x"]
    assert [uid for uid, _ in plan.reject] == ["a"] and "names attempt b" in plan.reject[0][1]
    assert [s.attempt_uid for s in plan.start] == ["x"]


def test_a_new_attempt_supersedes_a_live_attempt_of_the_same_task() -> None:
    plan = plan_worker_reconcile(
        [run("old"), run("new", True), run("other")],
        {"old": False, "other": False},
        {},
        {"old": "/u/j/0", "other": "/u/j/1"},
    )
    assert plan.supersede == (("old", "new"),)
    # An attempt already being stopped is not superseded a second time.
    plan = plan_worker_reconcile([stop("old"), run("new", True)], {"old": False}, {}, {"old": "/u/j/0"})
    assert plan.supersede == () and plan.stop == (("old", StopReason.PREEMPTED),)


def test_stop_keeps_its_reason() -> None:
    plan = plan_worker_reconcile([stop("a")], {"a": False}, {})
    assert plan.stop == (("a", StopReason.PREEMPTED),)


uids = st.sampled_from([f"u{i}" for i in range(8)])
entries = st.builds(
    lambda uid, kind: run(uid, kind == "spec") if kind != "stop" else stop(uid),
    uids,
    st.sampled_from(["spec", "bare", "stop"]),
)


@given(
    st.lists(entries, max_size=12),
    st.dictionaries(uids, st.booleans(), max_size=8),
    st.lists(uids, max_size=8),
)
def test_plan_properties(desired, local, cached) -> None:
    plan = plan_worker_reconcile(desired, local, {uid: spec(uid) for uid in cached})
    asked = list(dict.fromkeys(d.attempt_uid for d in desired))
    # Observations: exactly the asked-about uids (once each), then the zombies.
    assert list(plan.observe) == asked + list(plan.zombies)
    # Zombies are exactly the live local attempts nobody asked about.
    assert set(plan.zombies) == {uid for uid, ended in local.items() if not ended and uid not in asked}
    # Nothing known locally is ever started again; nothing is both started and missing.
    started = {s.attempt_uid for s in plan.start}
    assert not started & set(local)
    assert not started & set(plan.missing)
    # Only live attempts are stopped.
    assert all(uid in local and not local[uid] for uid, _ in plan.stop)
    assert plan.desired == frozenset(asked)


def test_a_zombie_already_killed_is_not_reported_again_while_it_dies() -> None:
    plan = plan_worker_reconcile([run("keep")], {"keep": False, "z": False}, {}, killed_zombies={"z"})
    assert plan.zombies == ()
    assert list(plan.observe) == ["keep"]
    asked = plan_worker_reconcile([stop("z")], {"z": False}, {}, killed_zombies={"z"})
    assert asked.stop == (("z", StopReason.PREEMPTED),) and list(asked.observe) == ["z"]
