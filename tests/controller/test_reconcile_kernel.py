"""The reconcile seams' pure decisions: each worker's desired set, health from reports, and
reaping a worker found at a reused address (reconcile_kernel.py)."""

from __future__ import annotations

import pytest

from iris.cluster.controller.effects import DeleteWorker, MoveAttempt, MoveTask, UpsertWorker
from iris.cluster.controller.reconcile_kernel import (
    desired_attempts,
    gang_coordinator,
    read_reports,
    register_effects,
)
from iris.cluster.controller.snapshots import LiveAttempt, ObservationSnapshot
from iris.cluster.controller.task_state import AttemptSnapshot, TaskSnapshot
from iris.cluster.controller.worker_health import HealthEvent
from iris.cluster.types import DesiredGroup, GroupReport
from iris.rpc.enums import StopReason, TaskState
from iris.rpc.gang import gang_port, pick_gang_port
from iris.rpc.models import (
    AttemptObservation,
    DesiredAttempt,
    Entrypoint,
    RegisterRequest,
    ResourceSpec,
    RunSpec,
    WorkerHealth,
)

S = TaskState


def _live(uid: str, state: TaskState, stop: StopReason | None = None, job: str = "/u/j") -> LiveAttempt:
    return LiveAttempt(uid, f"{job}/0", job, 0, 0, "w1", state, stop, state, uid)


def _run_spec(a: LiveAttempt) -> RunSpec:
    return RunSpec(
        attempt_uid=a.attempt_uid,
        attempt_number=a.attempt_number,
        job_id=a.job_id,
        task_id=a.task_id,
        task_index=a.task_index,
        entrypoint=Entrypoint.from_command("true"),
        resources=ResourceSpec(),
    )


@pytest.mark.parametrize(
    ("state", "stop", "intent", "with_spec", "reason"),
    [
        (S.ASSIGNED, None, "run", True, None),  # new: sent with its spec
        (S.RUNNING, None, "run", False, None),  # known: kept without one
        (S.BUILDING, None, "run", False, None),
        (S.RUNNING, StopReason.PREEMPTED, "stop", False, StopReason.PREEMPTED),  # stopped: with why
        (S.ASSIGNED, StopReason.CANCELLED, "stop", False, StopReason.CANCELLED),
        (S.KILLED, None, "stop", False, StopReason.JOB_TERMINATED),  # ended, not yet released
    ],
)
def test_desired_intent(
    state: TaskState, stop: StopReason | None, intent: str, with_spec: bool, reason: StopReason | None
) -> None:
    (d,) = desired_attempts([_live("a1", state, stop)], _run_spec, {}, {})
    assert (d.intent, d.spec is not None, d.stop_reason) == (intent, with_spec, reason)


def test_a_new_gang_member_gets_its_generation_size_and_coordinator() -> None:
    live = [_live("a1", S.ASSIGNED), _live("a2", S.ASSIGNED, job="/u/k")]
    leaders = {("/u/j", 3): ("http://10.0.0.7:8080", 24321)}
    d1, d2 = desired_attempts(live, _run_spec, {"a1": (3, 4), "a2": (0, 2)}, leaders)
    assert d1.spec is not None and (d1.spec.gang_generation, d1.spec.gang_size) == (3, 4)
    assert d1.spec.gang_coordinator == gang_coordinator("http://10.0.0.7:8080", 24321) == "10.0.0.7:24321"
    # no leader address known yet: generation and size, no coordinator
    assert d2.spec is not None and d2.spec.gang_size == 2 and d2.spec.gang_coordinator is None


def test_gang_ports_differ_per_generation_and_stay_below_the_ephemeral_range() -> None:
    ports = {gang_port("/u/j", g) for g in range(20)}
    assert len(ports) > 15 and all(20000 <= p < 30000 for p in ports)


def test_a_gang_port_held_by_a_live_gang_is_never_picked_again() -> None:
    first = gang_port("/u/j", 0)
    assert pick_gang_port("/u/j", 0, set()) == first
    assert pick_gang_port("/u/j", 0, {first}) == (first + 1 if first < 29999 else 20000)
    # the search wraps around the range: only the last port of it is free
    assert pick_gang_port("/u/j", 0, set(range(20000, 30000)) - {first - 1 if first > 20000 else 29999}) == (
        first - 1 if first > 20000 else 29999
    )


def _group(wid: str, uids: list[str], renew: bool = True) -> DesiredGroup:
    return DesiredGroup(
        tuple(DesiredAttempt(attempt_uid=u, intent="run") for u in uids), wid, "h:1", renew_lease=renew
    )


def _obs(uid: str) -> AttemptObservation:
    return AttemptObservation(attempt_uid=uid, state=S.RUNNING)


@pytest.mark.parametrize(
    ("report", "renew", "event", "arrived", "pressure"),
    [
        (GroupReport("w1", (_obs("a"),), WorkerHealth()), True, HealthEvent.REACHED, True, False),
        (GroupReport("w1", (), WorkerHealth(healthy=False)), True, HealthEvent.UNREACHABLE, True, False),
        (GroupReport("w1", (), WorkerHealth(disk_pressure=True)), False, HealthEvent.REACHED, False, True),
        # no answer: the call may have renewed the lease only if the answer, not the connection, was lost
        (
            GroupReport("w1", None, None, "timeout", may_have_arrived=True),
            True,
            HealthEvent.UNREACHABLE,
            True,
            None,
        ),
        (GroupReport("w1", None, None, "refused"), True, HealthEvent.UNREACHABLE, False, None),
        (
            GroupReport("w1", None, None, "timeout", may_have_arrived=True),
            False,
            HealthEvent.UNREACHABLE,
            False,
            None,
        ),
    ],
)
def test_health_from_a_report(
    report: GroupReport, renew: bool, event: HealthEvent, arrived: bool, pressure: bool | None
) -> None:
    (reading,), _ = read_reports({"w1": _group("w1", ["a"], renew)}, [report])
    assert (reading.worker_id, reading.event, reading.may_have_arrived, reading.disk_pressure) == (
        "w1",
        event,
        arrived,
        pressure,
    )
    assert (reading.health_json is not None) == (pressure is not None)


def test_reports_of_workers_or_attempts_not_asked_about_are_ignored() -> None:
    groups = {"w1": _group("w1", ["a"])}
    reports = [
        GroupReport("w1", (_obs("a"), _obs("zombie")), WorkerHealth()),
        GroupReport("w9", (_obs("b"),), WorkerHealth()),
        GroupReport(None, (_obs("c"),), WorkerHealth()),
    ]
    readings, observations = read_reports(groups, reports)
    assert [r.worker_id for r in readings] == ["w1"] and list(observations) == ["a"]


def test_registering_at_a_reused_address_reaps_the_worker_that_was_there() -> None:
    req = RegisterRequest(worker_id="new", address="10.0.0.1:9000", capacity=ResourceSpec())
    running = AttemptSnapshot("a1", "/u/j/0", S.RUNNING, worker_id="old", version=2)
    task = TaskSnapshot("/u/j/0", S.RUNNING, "a1", started_at=1.0, version=5)
    snap = ObservationSnapshot(attempts={"a1": running}, tasks={"/u/j/0": task})
    effects = register_effects("new", req, {"old": snap, "new": ObservationSnapshot({}, {})}, 10.0)
    writes = [w for c in effects.changes for w in c.writes]
    assert isinstance(writes[0], UpsertWorker) and writes[0].worker_id == "new"
    assert [w.worker_id for w in writes if isinstance(w, DeleteWorker)] == ["old"]  # never itself
    (moved,) = [w for w in writes if isinstance(w, MoveTask)]
    assert moved.after.state is S.PENDING  # lost with its worker: retried elsewhere
    assert any(isinstance(w, MoveAttempt) and w.after.state is S.WORKER_FAILED for w in writes)
    messages = [e.message for c in effects.changes for e in c.events]
    assert any("new now answers at 10.0.0.1:9000" in m for m in messages)


def test_registering_at_a_fresh_address_reaps_nobody() -> None:
    req = RegisterRequest(worker_id="w", address="10.0.0.2:9000", capacity=ResourceSpec())
    (change,) = register_effects("w", req, {}, 1.0).changes
    assert [type(w) for w in change.writes] == [UpsertWorker]
