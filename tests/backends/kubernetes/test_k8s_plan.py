"""plan_reconcile: creates, deletes and observations from desired attempts and listed pods."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from k8s_pod_factory import T0, make_pod, running, terminated

from iris.cluster.backends.kubernetes.plan import plan_reconcile
from iris.rpc.enums import StopReason, TaskState
from iris.rpc.models import DesiredAttempt, Entrypoint, ResourceSpec, RunSpec

RETENTION = 600.0


def spec(uid: str) -> RunSpec:
    return RunSpec(
        attempt_uid=uid,
        attempt_number=0,
        job_id="/a/j",
        task_id="/a/j/0",
        task_index=0,
        entrypoint=Entrypoint.from_command("true"),
        resources=ResourceSpec(),
    )


def run(uid: str, with_spec: bool = False) -> DesiredAttempt:
    return DesiredAttempt(attempt_uid=uid, intent="run", spec=spec(uid) if with_spec else None)


def stop(uid: str, reason: StopReason = StopReason.CANCELLED) -> DesiredAttempt:
    return DesiredAttempt(attempt_uid=uid, intent="stop", stop_reason=reason)


def pod(uid: str | None, **kw: Any) -> dict[str, Any]:
    return make_pod(name=f"p-{uid}", uid=uid, **kw)


def plan(desired: list[DesiredAttempt], pods: list[dict[str, Any]], now: float = T0 + 10):
    return plan_reconcile(desired, pods, now=now, terminal_pod_retention_s=RETENTION, image_pull_grace_s=120)


def test_new_attempt_with_spec_is_created() -> None:
    p = plan([run("a", with_spec=True)], [])
    assert [c.attempt_uid for c in p.creates] == ["a"]
    assert p.deletes == () and "a" not in p.observations and p.order == ("a",)


def test_existing_pod_is_not_created_again() -> None:
    p = plan([run("a", with_spec=True)], [pod("a", phase="Running", container_state=running())])
    assert p.creates == () and p.deletes == ()
    assert p.observations["a"].state is TaskState.RUNNING


def test_keep_without_pod_is_missing() -> None:
    p = plan([run("a")], [])
    assert p.creates == ()
    assert p.observations["a"].state is TaskState.MISSING


def test_stop_deletes_a_live_pod_once() -> None:
    p = plan([stop("a")], [pod("a", phase="Running", container_state=running())])
    assert [d.name for d in p.deletes] == ["p-a"]
    obs = p.observations["a"]
    assert obs.state is TaskState.KILLED and not obs.runtime_released
    again = plan([stop("a")], [pod("a", phase="Running", container_state=running(), deleting=True)])
    assert again.deletes == ()
    assert not again.observations["a"].runtime_released


def test_stop_is_released_once_the_pod_is_gone() -> None:
    obs = plan([stop("a", StopReason.PREEMPTED)], []).observations["a"]
    assert obs.state is TaskState.PREEMPTED and obs.runtime_released


def test_stop_keeps_a_finished_pod_for_its_logs() -> None:
    p = plan([stop("a")], [pod("a", phase="Failed", container_state=terminated(2))])
    assert p.deletes == ()
    obs = p.observations["a"]
    assert obs.runtime_released and obs.state is TaskState.FAILED and obs.exit_code == 2


def test_stop_of_a_pod_our_delete_ended_is_the_stop() -> None:
    """Killed by our delete, the pod turns Failed (exit 143) before it goes: that is the stop's
    outcome, not a program failure."""
    killed = pod("a", phase="Failed", container_state=terminated(143), deleting=True)
    p = plan([stop("a", StopReason.PREEMPTED)], [killed])
    assert p.deletes == ()
    obs = p.observations["a"]
    assert obs.state is TaskState.PREEMPTED and obs.runtime_released


def test_live_stray_is_deleted() -> None:
    p = plan([], [pod("z", phase="Running", container_state=running())])
    assert [(d.name, d.why) for d in p.deletes] == [("p-z", "stray")]
    assert p.observations == {}


def test_terminal_stray_is_kept_until_retention_expires() -> None:
    finished = pod("z", phase="Succeeded", container_state=terminated(0, "Completed", end=T0))
    assert plan([], [finished], now=T0 + RETENTION - 1).deletes == ()
    assert [d.why for d in plan([], [finished], now=T0 + RETENTION + 1).deletes] == ["expired"]


def test_pods_already_deleting_are_left_alone() -> None:
    p = plan([], [pod("z", phase="Running", deleting=True), pod("y", phase="Failed", deleting=True)])
    assert p.deletes == ()


def test_pod_without_attempt_label_is_a_stray() -> None:
    p = plan([], [pod(None, phase="Pending")])
    assert [d.name for d in p.deletes] == ["p-None"]


def test_kueue_reason_reaches_the_observation() -> None:
    gated = pod("a", gates=["kueue.x-k8s.io/admission"])
    p = plan_reconcile(
        [run("a")],
        [gated],
        now=T0,
        terminal_pod_retention_s=RETENTION,
        image_pull_grace_s=120,
        kueue_reasons={"p-a": "insufficient quota"},
    )
    assert p.observations["a"].message == "waiting for Kueue admission: insufficient quota"


pod_kinds = st.sampled_from(["none", "pending", "running", "succeeded", "failed", "deleting"])
intents = st.sampled_from(["absent", "run", "run+spec", "stop"])


def _pod_of(kind: str, uid: str) -> dict[str, Any] | None:
    return {
        "none": None,
        "pending": pod(uid),
        "running": pod(uid, phase="Running", container_state=running()),
        "succeeded": pod(uid, phase="Succeeded", container_state=terminated(0, "Completed")),
        "failed": pod(uid, phase="Failed", container_state=terminated(1)),
        "deleting": pod(uid, phase="Running", container_state=running(), deleting=True),
    }[kind]


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.tuples(pod_kinds, intents), min_size=0, max_size=12), st.floats(min_value=0, max_value=2000)
)
def test_plan_invariants(cases: list[tuple[str, str]], age: float) -> None:
    desired: list[DesiredAttempt] = []
    pods: list[dict[str, Any]] = []
    for i, (kind, intent) in enumerate(cases):
        uid = f"u{i}"
        p = _pod_of(kind, uid)
        if p is not None:
            pods.append(p)
        if intent == "run":
            desired.append(run(uid))
        elif intent == "run+spec":
            desired.append(run(uid, with_spec=True))
        elif intent == "stop":
            desired.append(stop(uid))
    result = plan(desired, pods, now=T0 + age)
    wanted = {d.attempt_uid for d in desired}
    created = {c.attempt_uid for c in result.creates}
    # one answer per desired attempt: observed now, or after its create
    assert set(result.order) == wanted
    assert created.isdisjoint(result.observations) and created | set(result.observations) == wanted
    # creates only where there is a spec and no pod; deletes never hit a pod twice
    listed = {p["metadata"]["annotations"]["iris.attempt_uid"] for p in pods}
    assert all(uid not in listed for uid in created)
    deleted = [d.name for d in result.deletes]
    assert len(deleted) == len(set(deleted))
    by_name = {p["metadata"]["name"]: p for p in pods}
    for name in deleted:
        assert not by_name[name]["metadata"].get("deletionTimestamp")
    # a pod the controller still wants to run is never deleted
    running_uids = {d.attempt_uid for d in desired if d.intent == "run"}
    assert all(by_name[n]["metadata"]["annotations"]["iris.attempt_uid"] not in running_uids for n in deleted)
