"""map_pod_status: every row of the pod -> attempt state table."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from k8s_pod_factory import T0, iso, make_pod, running, scheduled, terminated, waiting

from iris.cluster.backends.kubernetes.status import map_pod_status, parse_time
from iris.rpc.enums import TaskState

GRACE = 120.0
KUEUE = "kueue.x-k8s.io/admission"


def observe(pod: dict[str, Any] | None, *, now: float = T0 + 10, kueue_reason: str | None = None):
    return map_pod_status(pod, now=now, image_pull_grace_s=GRACE, kueue_reason=kueue_reason)


def _deleted(pod: dict[str, Any], *, grace: int) -> dict[str, Any]:
    pod["metadata"]["deletionTimestamp"] = iso(T0 + 5)
    pod["metadata"]["deletionGracePeriodSeconds"] = grace
    return pod


ROWS: list[tuple[str, dict[str, Any] | None, TaskState, str | None]] = [
    ("missing", None, TaskState.MISSING, "pod not found"),
    ("kueue gated", make_pod(gates=[KUEUE]), TaskState.ASSIGNED, "waiting for Kueue admission"),
    (
        "kueue gated, reason on pod",
        make_pod(
            gates=[KUEUE],
            conditions=[
                {"type": "PodScheduled", "status": "False", "reason": "SchedulingGated"},
                {
                    "type": "QuotaReserved",
                    "status": "False",
                    "reason": "Pending",
                    "message": "insufficient cpu",
                },
            ],
        ),
        TaskState.ASSIGNED,
        "waiting for Kueue admission: Pending: insufficient cpu",
    ),
    ("other gate", make_pod(gates=["example.com/hold"]), TaskState.ASSIGNED, "waiting for scheduling gates"),
    (
        "unschedulable",
        make_pod(
            conditions=[
                {
                    "type": "PodScheduled",
                    "status": "False",
                    "reason": "Unschedulable",
                    "message": "0/3 nodes fit",
                }
            ]
        ),
        TaskState.ASSIGNED,
        "Unschedulable: 0/3 nodes fit",
    ),
    ("not yet scheduled", make_pod(), TaskState.ASSIGNED, "waiting to be scheduled"),
    (
        "scheduled, creating",
        make_pod(node="n1", conditions=[scheduled()], container_state=waiting("ContainerCreating")),
        TaskState.BUILDING,
        "starting on node n1: ContainerCreating",
    ),
    (
        "image pull backoff within grace",
        make_pod(node="n1", conditions=[scheduled()], container_state=waiting("ImagePullBackOff", "nope")),
        TaskState.BUILDING,
        "image python:3.11-slim could not be pulled: ImagePullBackOff: nope",
    ),
    ("running", make_pod(phase="Running", node="n1", container_state=running()), TaskState.RUNNING, None),
    (
        "succeeded",
        make_pod(phase="Succeeded", container_state=terminated(0, "Completed")),
        TaskState.SUCCEEDED,
        None,
    ),
    (
        "failed exit 3",
        make_pod(phase="Failed", container_state=terminated(3)),
        TaskState.FAILED,
        "exited with code 3",
    ),
    (
        "oom",
        make_pod(phase="Failed", container_state=terminated(137, "OOMKilled")),
        TaskState.FAILED,
        "out of memory (OOMKilled)",
    ),
    (
        "disruption target",
        make_pod(
            phase="Failed",
            container_state=terminated(137),
            conditions=[
                {
                    "type": "DisruptionTarget",
                    "status": "True",
                    "reason": "PreemptionByScheduler",
                    "message": "x",
                }
            ],
        ),
        TaskState.PREEMPTED,
        "pod disrupted: PreemptionByScheduler: x",
    ),
    (
        "evicted",
        make_pod(phase="Failed", reason="Evicted", message="node low on memory"),
        TaskState.WORKER_FAILED,
        "Evicted: node low on memory",
    ),
    (
        "preempting",
        make_pod(phase="Failed", reason="Preempting", container_state=terminated(137)),
        TaskState.WORKER_FAILED,
        "Preempting",
    ),
    (
        "deleted by someone else while running",
        make_pod(phase="Running", deleting=True, container_state=running()),
        TaskState.WORKER_FAILED,
        "being deleted outside Iris",
    ),
    (
        # kubectl delete pod --wait=false: the kubelet's SIGTERM ends the task (143) and the pod
        # fails before it goes; deletion asked at T0+5-30 (deletionTimestamp minus the grace).
        "deleted by someone else, the kubelet's SIGTERM ended it",
        _deleted(make_pod(phase="Failed", container_state=terminated(143, end=T0 + 2)), grace=30),
        TaskState.WORKER_FAILED,
        "deleted outside Iris",
    ),
    (
        "failed on its own, deleted afterwards",
        _deleted(make_pod(phase="Failed", container_state=terminated(3, end=T0 - 40)), grace=30),
        TaskState.FAILED,
        "exited with code 3",
    ),
    (
        "kueue stopping a running pod",
        make_pod(
            phase="Running",
            container_state=running(),
            conditions=[
                {
                    "type": "TerminationTarget",
                    "status": "True",
                    "reason": "WorkloadEvictedDueToPodsReadyTimeout",
                }
            ],
        ),
        TaskState.WORKER_FAILED,
        "WorkloadEvictedDueToPodsReadyTimeout",
    ),
    (
        # What Kueue v0.17 writes when it preempts a pod (or a whole pod group), then deletes it.
        "kueue preemption, pod still running",
        make_pod(
            phase="Running",
            deleting=True,
            container_state=running(),
            conditions=[
                {
                    "type": "TerminationTarget",
                    "status": "True",
                    "reason": "WorkloadEvictedDueToPreempted",
                    "message": "Preempted to accommodate a workload (UID: 1) due to prioritization in the ClusterQueue",
                }
            ],
        ),
        TaskState.PREEMPTED,
        "WorkloadEvictedDueToPreempted: Preempted to accommodate",
    ),
    (
        "kueue preemption, container killed",
        make_pod(
            phase="Failed",
            deleting=True,
            container_state=terminated(143),
            conditions=[
                {"type": "TerminationTarget", "status": "True", "reason": "WorkloadEvictedDueToPreempted"}
            ],
        ),
        TaskState.PREEMPTED,
        "WorkloadEvictedDueToPreempted",
    ),
    (
        "kueue deactivated the workload",
        make_pod(
            phase="Failed",
            container_state=terminated(143),
            conditions=[
                {"type": "TerminationTarget", "status": "True", "reason": "WorkloadEvictedDueToDeactivated"}
            ],
        ),
        TaskState.WORKER_FAILED,
        "WorkloadEvictedDueToDeactivated",
    ),
    (
        "orphaned pod failed by pod GC",
        make_pod(
            phase="Failed",
            deleting=True,
            conditions=[{"type": "DisruptionTarget", "status": "True", "reason": "DeletionByPodGC"}],
        ),
        TaskState.WORKER_FAILED,
        "DeletionByPodGC",
    ),
    (
        "failed before the container ran",
        make_pod(phase="Failed", reason="NodeAffinity", message="node didn't match"),
        TaskState.WORKER_FAILED,
        "NodeAffinity",
    ),
    ("unknown phase", make_pod(phase="Unknown"), TaskState.WORKER_FAILED, "unknown"),
]


@pytest.mark.parametrize(("pod", "state", "message"), [r[1:] for r in ROWS], ids=[r[0] for r in ROWS])
def test_map_pod_status_rows(pod: dict[str, Any] | None, state: TaskState, message: str | None) -> None:
    obs = observe(pod)
    assert obs.state is state
    if message is not None:
        assert message in (obs.message or "")


def test_an_init_container_the_image_cannot_start_fails_the_task_not_the_node() -> None:
    """As the real kubelet reports an image without the interpreter the init container runs."""
    pod = make_pod(phase="Failed", container_state=waiting("PodInitializing"))
    pod["status"]["initContainerStatuses"] = [
        {
            "name": "fetch-bundle",
            "state": {
                "terminated": {
                    "exitCode": 128,
                    "reason": "StartError",
                    "message": 'exec: "python3": executable file not found in $PATH',
                }
            },
        }
    ]
    obs = observe(pod)
    assert obs.state is TaskState.FAILED
    assert (
        obs.message
        == 'init container fetch-bundle could not start: exec: "python3": executable file not found in $PATH'
    )


def test_an_init_container_that_failed_says_why_in_the_attempt() -> None:
    """A bundle fetch that could not reach the controller: the attempt's error is its last line,
    not only "the pod failed before its container started"."""
    pod = make_pod(phase="Failed", container_state=waiting("PodInitializing"))
    message = "could not fetch bundle ab12 from http://10.65.0.1:1/: <urlopen error [Errno 101] Network is unreachable>\n"
    pod["status"]["initContainerStatuses"] = [
        {
            "name": "fetch-bundle",
            "state": {"terminated": {"exitCode": 1, "reason": "Error", "message": message}},
        }
    ]
    obs = observe(pod)
    assert obs.state is TaskState.WORKER_FAILED
    assert obs.error == f"init container fetch-bundle exited with code 1: {message.strip()}"


def test_an_environment_build_that_failed_is_an_environment_failure_of_the_task() -> None:
    """As the real kubelet reports the build-env init container that exited 1 (its log's tail as
    the message, FallbackToLogsOnError): the task failed, kind environment, with uv's words."""
    pod = make_pod(phase="Failed", container_state=waiting("PodInitializing"))
    summary = (
        "environment: uv sync --frozen (uv.lock ee56b39acce6) failed (uv exited with code 2): "
        "error: Failed to parse `uv.lock`"
    )
    message = f"building environment 1234 on n0: uv sync --frozen\nuv: error: Failed to parse `uv.lock`\n{summary}\n"
    pod["status"]["initContainerStatuses"] = [
        {"name": "fetch-bundle", "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}},
        {
            "name": "build-env",
            "state": {"terminated": {"exitCode": 1, "reason": "Error", "message": message}},
        },
    ]
    obs = observe(pod)
    assert obs.state is TaskState.FAILED and obs.error == summary and obs.runtime_released
    # While it builds, the task is BUILDING and says so.
    building = make_pod(phase="Pending", node="n0", container_state=waiting("PodInitializing"))
    building["status"]["initContainerStatuses"] = [
        {"name": "build-env", "state": {"running": {"startedAt": iso(T0)}}},
    ]
    obs = observe(building)
    assert obs.state is TaskState.BUILDING and obs.message is not None
    assert obs.message == "building the job's environment on node n0", obs.message
    # Killed without a word (OOM): still the environment's failure, said plainly.
    pod["status"]["initContainerStatuses"][1]["state"]["terminated"] = {
        "exitCode": 137,
        "reason": "OOMKilled",
    }
    assert observe(pod).error == "environment: building the environment ran out of memory (OOMKilled)"


def test_exit_codes_and_times_are_reported() -> None:
    obs = observe(make_pod(phase="Failed", container_state=terminated(3, start=T0 + 1, end=T0 + 4)))
    assert (obs.exit_code, obs.started_at, obs.finished_at) == (3, T0 + 1, T0 + 4)
    assert obs.error == "exited with code 3" and obs.runtime_released
    ok = observe(make_pod(phase="Succeeded", container_state=terminated(0, "Completed", end=T0 + 9)))
    assert (ok.exit_code, ok.finished_at, ok.runtime_released) == (0, T0 + 9, True)
    run = observe(make_pod(phase="Running", node="n1", container_state=running(T0 + 2)))
    assert run.started_at == T0 + 2 and not run.runtime_released


def test_kueue_reason_from_workload_wins_over_the_bare_gate() -> None:
    obs = observe(make_pod(gates=[KUEUE]), kueue_reason="couldn't assign flavors: insufficient quota for cpu")
    assert obs.message == "waiting for Kueue admission: couldn't assign flavors: insufficient quota for cpu"


def test_image_pull_fails_after_grace_measured_from_scheduling() -> None:
    pod = make_pod(
        node="n1", conditions=[scheduled(T0)], container_state=waiting("ErrImagePull", "not found")
    )
    assert observe(pod, now=T0 + GRACE - 1).state is TaskState.BUILDING
    late = observe(pod, now=T0 + GRACE + 1)
    assert late.state is TaskState.FAILED
    assert late.error == "image python:3.11-slim could not be pulled: ErrImagePull: not found"
    assert not late.runtime_released  # the pod still exists until it is deleted


def test_invalid_image_name_fails_at_once() -> None:
    pod = make_pod(node="n1", conditions=[scheduled(T0)], container_state=waiting("InvalidImageName"))
    assert observe(pod, now=T0 + 1).state is TaskState.FAILED


def test_time_parsing() -> None:
    assert parse_time(iso(T0)) == T0
    assert parse_time("2024-01-01T00:00:00.5Z") == parse_time("2024-01-01T00:00:00Z") + 0.5
    assert parse_time(None) is None and parse_time("garbage") is None


phases = st.sampled_from(["Pending", "Running", "Succeeded", "Failed", "Unknown", None])
reasons = st.sampled_from([None, "Evicted", "Preempting", "NodeAffinity", "DeadlineExceeded"])
states = st.sampled_from(
    [
        None,
        running(),
        terminated(0, "Completed"),
        terminated(1),
        terminated(137, "OOMKilled"),
        waiting("ErrImagePull"),
    ]
)


@settings(max_examples=300, deadline=None)
@given(phases, reasons, states, st.booleans(), st.booleans(), st.floats(min_value=0, max_value=1000))
def test_every_pod_maps_to_a_reportable_state(
    phase: str | None, reason: str | None, state: dict | None, gated: bool, deleting: bool, age: float
) -> None:
    pod = make_pod(
        phase=phase or "Pending",
        reason=reason,
        container_state=state,
        gates=[KUEUE] if gated else None,
        deleting=deleting,
        node="n1" if not gated else None,
        conditions=[scheduled()] if not gated else None,
    )
    if phase is None:
        del pod["status"]["phase"]
    obs = observe(pod, now=T0 + age)
    assert obs.state is not TaskState.PENDING and obs.state is not TaskState.MISSING
    if obs.state in (TaskState.FAILED, TaskState.WORKER_FAILED, TaskState.PREEMPTED):
        assert obs.error
    if obs.state is TaskState.SUCCEEDED:
        assert obs.exit_code == 0
    if phase in ("Succeeded", "Failed"):
        assert obs.runtime_released
    if phase in ("Running", "Pending", None):
        assert not obs.runtime_released


@pytest.mark.parametrize("reason", ["WorkloadEvictedDueToPreempted", "WorkloadEvictedDueToDeactivated"])
def test_kueue_stopping_a_pod_spends_the_preemption_budget_only(reason: str) -> None:
    """Whatever Kueue's reason, the attempt it stopped is retried on the preemption budget."""
    from iris.cluster.controller.task_state import AttemptSnapshot, TaskSnapshot, apply_observation
    from iris.rpc.models import AttemptObservation

    pod = make_pod(
        phase="Failed",
        deleting=True,
        container_state=terminated(143),
        conditions=[{"type": "TerminationTarget", "status": "True", "reason": reason}],
    )
    obs = observe(pod)
    task = TaskSnapshot("/a/j/0", TaskState.RUNNING, "u1", max_retries_failure=0, max_retries_preemption=3)
    attempt = AttemptSnapshot("u1", "/a/j/0", TaskState.RUNNING)
    moved = apply_observation(
        task, attempt, AttemptObservation(attempt_uid="u1", state=obs.state, error=obs.error), now=T0 + 20
    )
    assert moved.task.state is TaskState.PENDING  # retried, although no failure retry is allowed
    assert moved.task.failure_count == 0 and moved.task.preemption_count == 1
    assert not moved.failed_attempt
