"""Pod phase and conditions -> Iris attempt state (pure).

The rules, in order:

- no pod -> MISSING (the controller turns a vanished pod into WORKER_FAILED and retries);
- Succeeded -> SUCCEEDED; Failed -> FAILED for the program's own failures (non-zero exit,
  OOMKilled) or WORKER_FAILED for the infrastructure's (disruption, eviction, node loss), and
  PREEMPTED when Kueue or the scheduler preempted it (both spend the preemption budget);
- being deleted by someone else -> WORKER_FAILED, also once the kubelet has killed the task for
  it (phase Failed, exit 143, with the container ended after the deletion was asked for);
- Pending, gated by Kueue -> ASSIGNED "waiting for Kueue admission: <reason>";
  unschedulable -> ASSIGNED with the scheduler's message; scheduled with containers
  waiting -> BUILDING (image pull errors in the message, FAILED after the grace period);
- Running -> RUNNING.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from iris.cluster.backends.kubernetes.environment import environment_building, environment_failure
from iris.cluster.backends.kubernetes.naming import TASK_CONTAINER
from iris.rpc.enums import TaskState

KUEUE_ADMISSION_GATE = "kueue.x-k8s.io/admission"

# Pod reasons the kubelet, the scheduler or an evictor set when the node, not the program, failed.
INFRASTRUCTURE_REASONS = frozenset(
    {
        "Evicted",
        "Preempting",
        "NodeLost",
        "NodeShutdown",
        "Shutdown",
        "Terminated",
        "UnexpectedAdmissionError",
        "NodeAffinity",
        "OutOfcpu",
        "OutOfmemory",
        "OutOfpods",
    }
)
# Conditions that announce the pod is being taken away (DisruptionTarget is Kubernetes'
# own; TerminationTarget is what Kueue sets when it stops a plain pod). Either way the
# infrastructure took the pod: the attempt spends the preemption budget, never the failure one.
DISRUPTION_CONDITIONS = ("DisruptionTarget", "TerminationTarget")
# Reasons on those conditions that mean a higher-priority workload took the place. Kueue writes
# its stop reason, "WorkloadEvictedDueTo" + the Workload's Evicted reason ("Preempted"); the
# scheduler writes PreemptionByScheduler. Other reasons (a deactivated Workload, node failure,
# eviction API, pod GC) are reported as lost to the infrastructure.
PREEMPTION_REASONS = frozenset(
    {
        "WorkloadEvictedDueToPreempted",
        "Preempted",
        "PreemptionByScheduler",
    }
)
# Container waiting reasons that mean the container cannot start as specified.
IMAGE_PULL_REASONS = frozenset({"ImagePullBackOff", "ErrImagePull", "InvalidImageName", "ErrImageNeverPull"})
START_FAILURE_REASONS = frozenset({"CreateContainerConfigError", "CreateContainerError", "RunContainerError"})
_STANDARD_CONDITIONS = frozenset(
    {"PodScheduled", "Initialized", "ContainersReady", "Ready", "PodReadyToStartContainers"}
)


@dataclass(frozen=True)
class PodObservation:
    """What one pod says about its attempt: the fields of ``AttemptObservation`` but its uid
    (``plan.to_observation`` adds it; the names must stay the same)."""

    state: TaskState
    message: str | None = None
    error: str | None = None
    exit_code: int | None = None
    started_at: float | None = None
    finished_at: float | None = None
    # The task's processes are gone (pod terminal or absent): nothing of it still runs.
    runtime_released: bool = False


def parse_time(value: Any) -> float | None:
    """RFC 3339 timestamp (as the API server writes them) -> epoch seconds."""
    if not isinstance(value, str) or not value:
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def map_pod_status(
    pod: dict[str, Any] | None,
    *,
    now: float,
    image_pull_grace_s: float,
    kueue_reason: str | None = None,
) -> PodObservation:
    """Map one pod to its attempt's observed state.

    ``kueue_reason`` is Kueue's explanation of a pending admission when the caller found it
    on the pod's Workload (Kueue does not always write it on the pod itself).
    """
    if pod is None:
        return PodObservation(TaskState.MISSING, message="pod not found", runtime_released=True)
    metadata = pod.get("metadata") or {}
    status = pod.get("status") or {}
    phase = status.get("phase") or "Pending"
    container = _task_container_status(status)
    started_at, finished_at = _container_times(container)

    if phase == "Succeeded":
        return PodObservation(
            TaskState.SUCCEEDED,
            exit_code=0,
            started_at=started_at,
            finished_at=finished_at or _latest_transition(status),
            runtime_released=True,
        )
    if phase == "Failed" and _ended_by_outside_deletion(metadata, container, finished_at):
        # Deleted by someone else (kubectl delete pod): the kubelet's SIGTERM ended the task (exit
        # 143), so the pod fails - an infrastructure loss, never the job's failure.
        why = _disruption(status) or "the pod was deleted outside Iris"
        return PodObservation(
            _disrupted_state(status),
            error=why,
            message=why,
            started_at=started_at,
            finished_at=finished_at or _latest_transition(status),
            runtime_released=True,
        )
    if phase in ("Failed", "Unknown"):
        return _failed(phase, status, container, started_at, finished_at or _latest_transition(status))

    disruption = _disruption(status)
    if metadata.get("deletionTimestamp"):
        why = disruption or "the pod is being deleted outside Iris"
        return PodObservation(_disrupted_state(status), error=why, message=why, started_at=started_at)
    if disruption:
        return PodObservation(
            _disrupted_state(status), error=disruption, message=disruption, started_at=started_at
        )

    if phase == "Running":
        return PodObservation(TaskState.RUNNING, started_at=started_at, message=_node_message(pod))
    return _pending(pod, status, now=now, image_pull_grace_s=image_pull_grace_s, kueue_reason=kueue_reason)


def is_terminal_pod(pod: dict[str, Any]) -> bool:
    return ((pod.get("status") or {}).get("phase")) in ("Succeeded", "Failed")


def pod_finished_at(pod: dict[str, Any]) -> float | None:
    """When a terminal pod finished (container end, else its last condition change)."""
    status = pod.get("status") or {}
    _, finished = _container_times(_task_container_status(status))
    return (
        finished
        or _latest_transition(status)
        or parse_time((pod.get("metadata") or {}).get("creationTimestamp"))
    )


def is_kueue_gated(pod: dict[str, Any]) -> bool:
    gates = (pod.get("spec") or {}).get("schedulingGates") or []
    return any(g.get("name") == KUEUE_ADMISSION_GATE for g in gates)


# ---------------------------------------------------------------- helpers


def _ended_by_outside_deletion(
    metadata: dict[str, Any], container: dict[str, Any] | None, finished_at: float | None
) -> bool:
    """The pod is being deleted gracefully and its task container was killed by a signal (143,
    137) no earlier than the deletion was asked for (``deletionTimestamp`` is the request time
    plus the grace period; whole seconds)."""
    deleting = parse_time(metadata.get("deletionTimestamp"))
    grace = float(metadata.get("deletionGracePeriodSeconds") or 0)
    if deleting is None or grace <= 0:  # a finished pod's delete has no grace: it did not kill it
        return False
    terminated = ((container or {}).get("state") or {}).get("terminated") or {}
    if terminated.get("exitCode") not in (128 + 15, 128 + 9):  # not ended by SIGTERM or SIGKILL
        return False
    return finished_at is None or finished_at >= deleting - grace


# Terminated reasons of a container the runtime could not start at all (runc's "executable file
# not found", a bad working dir): the image does not fit the pod.
UNSTARTABLE_REASONS = frozenset({"StartError", "ContainerCannotRun"})


def _unstartable_init_container(status: dict[str, Any]) -> str | None:
    for init in status.get("initContainerStatuses") or []:
        terminated = (init.get("state") or {}).get("terminated") or {}
        if terminated.get("reason") in UNSTARTABLE_REASONS:
            detail = (terminated.get("message") or "").strip()
            return _join(f"init container {init.get('name')} could not start", detail)
    return None


def _failed_init_container(status: dict[str, Any]) -> str | None:
    for init in status.get("initContainerStatuses") or []:
        terminated = (init.get("state") or {}).get("terminated") or {}
        code = terminated.get("exitCode")
        if code not in (None, 0):
            lines = (terminated.get("message") or "").strip().splitlines()
            return _join(
                f"init container {init.get('name')} exited with code {code}", lines[-1] if lines else ""
            )
    return None


def _failed(
    phase: str,
    status: dict[str, Any],
    container: dict[str, Any] | None,
    started_at: float | None,
    finished_at: float | None,
) -> PodObservation:
    reason = status.get("reason") or ""
    detail = status.get("message") or ""
    disruption = _disruption(status)
    if disruption or reason in INFRASTRUCTURE_REASONS or phase == "Unknown":
        why = disruption or _join(reason or "pod state unknown (node lost?)", detail)
        return PodObservation(
            _disrupted_state(status) if disruption else TaskState.WORKER_FAILED,
            error=why,
            message=why,
            started_at=started_at,
            finished_at=finished_at,
            runtime_released=phase == "Failed",
        )
    environment = environment_failure(status)
    if environment:  # uv could not build the job's environment: the job's lock or packages, not the node
        return PodObservation(
            TaskState.FAILED,
            error=environment,
            message=environment,
            finished_at=finished_at,
            runtime_released=True,
        )
    terminated = ((container or {}).get("state") or {}).get("terminated")
    unstartable = _unstartable_init_container(status)
    if not terminated and unstartable:
        # The image cannot run what the pod asks of it (no python3, say): the job's image is at
        # fault, not the node, so it is a task failure within the job's retries, not a re-run forever.
        return PodObservation(
            TaskState.FAILED,
            error=unstartable,
            message=unstartable,
            finished_at=finished_at,
            runtime_released=True,
        )
    if not terminated:
        # Failed before the task container ever ran: the node rejected the pod, or an init
        # container (a bundle fetch, a gang rendezvous) failed; its last line says why.
        why = _join(
            reason or _failed_init_container(status) or "the pod failed before its container started", detail
        )
        return PodObservation(
            TaskState.WORKER_FAILED, error=why, message=why, finished_at=finished_at, runtime_released=True
        )
    exit_code = terminated.get("exitCode")
    term_reason = terminated.get("reason") or ""
    if term_reason == "OOMKilled":
        error = "out of memory (OOMKilled)"
    elif exit_code not in (None, 0):
        error = f"exited with code {exit_code}"
    else:
        error = _join(reason or term_reason or "the pod failed", detail)
    tail = (terminated.get("message") or "").strip()
    message = _join(error, tail.splitlines()[-1] if tail else "")
    return PodObservation(
        TaskState.FAILED,
        error=error,
        message=message,
        exit_code=exit_code if isinstance(exit_code, int) else None,
        started_at=started_at,
        finished_at=finished_at,
        runtime_released=True,
    )


def _pending(
    pod: dict[str, Any],
    status: dict[str, Any],
    *,
    now: float,
    image_pull_grace_s: float,
    kueue_reason: str | None,
) -> PodObservation:
    spec = pod.get("spec") or {}
    conditions = status.get("conditions") or []
    if is_kueue_gated(pod):
        reason = kueue_reason or _kueue_condition_message(conditions)
        message = "waiting for Kueue admission" + (f": {reason}" if reason else "")
        return PodObservation(TaskState.ASSIGNED, message=message)
    gates = [g.get("name", "") for g in spec.get("schedulingGates") or []]
    if gates:
        return PodObservation(TaskState.ASSIGNED, message=f"waiting for scheduling gates: {', '.join(gates)}")
    scheduled = _condition(conditions, "PodScheduled")
    if scheduled is not None and scheduled.get("status") == "False":
        reason = scheduled.get("reason") or "Unschedulable"
        message = scheduled.get("message") or "no node can run this pod yet"
        return PodObservation(TaskState.ASSIGNED, message=f"{reason}: {message}")
    if not spec.get("nodeName") and (scheduled is None or scheduled.get("status") != "True"):
        return PodObservation(TaskState.ASSIGNED, message="waiting to be scheduled")

    container = _task_container_status(status)
    waiting = ((container or {}).get("state") or {}).get("waiting") or {}
    reason = waiting.get("reason") or ""
    detail = waiting.get("message") or ""
    if reason in IMAGE_PULL_REASONS or reason in START_FAILURE_REASONS:
        if reason in IMAGE_PULL_REASONS:
            # Starts with "image <name>": the controller's failure kind "image".
            image = (container or {}).get("image") or _spec_image(spec) or "of the task"
            what = f"image {image} could not be pulled"
        else:
            what = "container could not start"
        message = f"{what}: {_join(reason, detail)}"
        since = _scheduled_at(pod, scheduled)
        if reason == "InvalidImageName" or (since is not None and now - since >= image_pull_grace_s):
            return PodObservation(TaskState.FAILED, error=message, message=message)
        return PodObservation(TaskState.BUILDING, message=message)
    node = spec.get("nodeName")
    where = f" on node {node}" if node else ""
    if environment_building(status):
        return PodObservation(TaskState.BUILDING, message=f"building the job's environment{where}")
    if reason:
        return PodObservation(TaskState.BUILDING, message=f"starting{where}: {_join(reason, detail)}")
    return PodObservation(TaskState.BUILDING, message=f"starting{where}")


def _spec_image(spec: dict[str, Any]) -> str | None:
    for container in spec.get("containers") or ():
        if container.get("name") == TASK_CONTAINER:
            return container.get("image")
    return None


def _task_container_status(status: dict[str, Any]) -> dict[str, Any] | None:
    statuses = status.get("containerStatuses") or []
    for cs in statuses:
        if cs.get("name") == TASK_CONTAINER:
            return cs
    return statuses[0] if statuses else None


def _container_times(container: dict[str, Any] | None) -> tuple[float | None, float | None]:
    state = (container or {}).get("state") or {}
    if "running" in state and state["running"]:
        return parse_time(state["running"].get("startedAt")), None
    terminated = state.get("terminated")
    if terminated:
        return parse_time(terminated.get("startedAt")), parse_time(terminated.get("finishedAt"))
    return None, None


def _condition(conditions: list[dict[str, Any]], kind: str) -> dict[str, Any] | None:
    for c in conditions:
        if c.get("type") == kind:
            return c
    return None


def _disruption(status: dict[str, Any]) -> str | None:
    for kind in DISRUPTION_CONDITIONS:
        c = _condition(status.get("conditions") or [], kind)
        if c is not None and c.get("status") == "True":
            return "pod disrupted: " + _join(c.get("reason") or kind, c.get("message") or "")
    return None


def _disrupted_state(status: dict[str, Any]) -> TaskState:
    """PREEMPTED when a disruption condition names a preemption, else WORKER_FAILED (both
    spend the preemption budget)."""
    for kind in DISRUPTION_CONDITIONS:
        c = _condition(status.get("conditions") or [], kind)
        if c is not None and c.get("status") == "True" and c.get("reason") in PREEMPTION_REASONS:
            return TaskState.PREEMPTED
    return TaskState.WORKER_FAILED


def _kueue_condition_message(conditions: list[dict[str, Any]]) -> str | None:
    """Kueue's verdict when written on the pod: a non-standard condition that is not True."""
    for c in conditions:
        if c.get("type") in _STANDARD_CONDITIONS or c.get("status") == "True":
            continue
        text = _join(c.get("reason") or "", c.get("message") or "")
        if text:
            return text
    return None


def _scheduled_at(pod: dict[str, Any], scheduled: dict[str, Any] | None) -> float | None:
    if scheduled is not None and scheduled.get("status") == "True":
        at = parse_time(scheduled.get("lastTransitionTime"))
        if at is not None:
            return at
    status = pod.get("status") or {}
    return parse_time(status.get("startTime")) or parse_time(
        (pod.get("metadata") or {}).get("creationTimestamp")
    )


def _latest_transition(status: dict[str, Any]) -> float | None:
    times = [parse_time(c.get("lastTransitionTime")) for c in status.get("conditions") or []]
    known = [t for t in times if t is not None]
    return max(known) if known else None


def _node_message(pod: dict[str, Any]) -> str | None:
    node = (pod.get("spec") or {}).get("nodeName")
    return f"running on node {node}" if node else None


def _join(head: str, tail: str) -> str:
    if head and tail:
        return f"{head}: {tail}"
    return head or tail
