"""Desired attempts x observed pods -> API writes and observations (pure).

The shell lists our pods, calls :func:`plan_reconcile`, then performs the creates and
deletes. At most two writes ever touch one attempt's pod: its create and its delete. Pods
already being deleted are never deleted again, and nothing is ever patched.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from iris.cluster.backends.kubernetes.naming import ANNOTATION_ATTEMPT_UID, LABEL_ATTEMPT_UID
from iris.cluster.backends.kubernetes.status import (
    PodObservation,
    is_kueue_gated,
    is_terminal_pod,
    map_pod_status,
    pod_finished_at,
)
from iris.rpc.enums import StopReason, TaskState
from iris.rpc.models import AttemptObservation, DesiredAttempt, RunSpec


@dataclass(frozen=True)
class PodCreate:
    attempt_uid: str
    spec: RunSpec


@dataclass(frozen=True)
class PodDelete:
    name: str
    # "stop" (the controller asked), "stray" (live pod nobody wants), "expired" (terminal
    # stray past its retention).
    why: str


@dataclass(frozen=True)
class ReconcilePlan:
    creates: tuple[PodCreate, ...] = ()
    deletes: tuple[PodDelete, ...] = ()
    # One per desired attempt that needs no create; created ones are observed after the write.
    observations: Mapping[str, AttemptObservation] = field(default_factory=dict)
    # Desired attempt uids, in request order, deduplicated.
    order: tuple[str, ...] = ()


def pod_attempt_uid(pod: dict[str, Any]) -> str | None:
    metadata = pod.get("metadata") or {}
    uid = (metadata.get("annotations") or {}).get(ANNOTATION_ATTEMPT_UID)
    return uid or (metadata.get("labels") or {}).get(LABEL_ATTEMPT_UID)


def pod_name_of(pod: dict[str, Any]) -> str:
    return (pod.get("metadata") or {}).get("name", "")


def is_deleting(pod: dict[str, Any]) -> bool:
    return bool((pod.get("metadata") or {}).get("deletionTimestamp"))


def to_observation(attempt_uid: str, obs: PodObservation) -> AttemptObservation:
    """The one observation type: a pod's reading is an ``AttemptObservation`` without its uid."""
    return AttemptObservation(attempt_uid=attempt_uid, **asdict(obs))


def stopped_state(reason: StopReason | None) -> TaskState:
    return TaskState.PREEMPTED if reason is StopReason.PREEMPTED else TaskState.KILLED


def plan_reconcile(
    desired: Sequence[DesiredAttempt],
    pods: Iterable[dict[str, Any]],
    *,
    now: float,
    terminal_pod_retention_s: float,
    image_pull_grace_s: float,
    kueue_reasons: Mapping[str, str] | None = None,
    kueue_refusals: Mapping[str, str] | None = None,
) -> ReconcilePlan:
    """Decide what to create, what to delete and what to report.

    ``pods`` are the pods labelled as this backend's; ``kueue_reasons`` maps a pod name to
    Kueue's explanation of why its workload is not admitted yet, ``kueue_refusals`` to why it
    never will be (the attempt fails, and its pod is deleted as a stray once it is let go).
    """
    kueue_reasons = kueue_reasons or {}
    kueue_refusals = kueue_refusals or {}
    by_uid: dict[str, dict[str, Any]] = {}
    unowned: list[dict[str, Any]] = []
    for pod in pods:
        uid = pod_attempt_uid(pod)
        if uid is None or uid in by_uid:
            unowned.append(pod)
        else:
            by_uid[uid] = pod

    wanted: dict[str, DesiredAttempt] = {}
    for attempt in desired:
        wanted[attempt.attempt_uid] = attempt

    creates: list[PodCreate] = []
    deletes: list[PodDelete] = []
    observations: dict[str, AttemptObservation] = {}
    for uid, attempt in wanted.items():
        pod = by_uid.get(uid)
        if attempt.intent == "stop":
            observations[uid] = _stop(uid, attempt, pod, deletes)
            continue
        if pod is None and attempt.spec is not None:
            creates.append(PodCreate(uid, attempt.spec))
            continue
        refusal = kueue_refusals.get(pod_name_of(pod)) if pod is not None else None
        if refusal is not None and pod is not None and is_kueue_gated(pod):
            message = f"Kueue will never admit pod {pod_name_of(pod)}: {refusal}"
            observations[uid] = AttemptObservation(
                attempt_uid=uid, state=TaskState.FAILED, error=message, message=message, runtime_released=True
            )
            continue
        reason = kueue_reasons.get(pod_name_of(pod)) if pod is not None else None
        obs = map_pod_status(pod, now=now, image_pull_grace_s=image_pull_grace_s, kueue_reason=reason)
        observations[uid] = to_observation(uid, obs)

    strays = [pod for uid, pod in by_uid.items() if uid not in wanted] + unowned
    for pod in strays:
        if is_deleting(pod):
            continue
        if not is_terminal_pod(pod):
            deletes.append(PodDelete(pod_name_of(pod), "stray"))
            continue
        finished = pod_finished_at(pod)
        if finished is None or now - finished >= terminal_pod_retention_s:
            deletes.append(PodDelete(pod_name_of(pod), "expired"))

    return ReconcilePlan(
        creates=tuple(creates),
        deletes=tuple(deletes),
        observations=observations,
        order=tuple(wanted),
    )


def _stop(
    uid: str, attempt: DesiredAttempt, pod: dict[str, Any] | None, deletes: list[PodDelete]
) -> AttemptObservation:
    """Stop intent: delete a live pod once; a finished pod is kept (its logs stay readable)
    until it ages out as a stray; report released once nothing runs."""
    state = stopped_state(attempt.stop_reason)
    if pod is None:
        return AttemptObservation(attempt_uid=uid, state=state, runtime_released=True, message="pod deleted")
    if is_terminal_pod(pod) and is_deleting(pod):
        # Ended by the delete we sent (its exit code is the kill's): the stop's outcome, released.
        return AttemptObservation(attempt_uid=uid, state=state, runtime_released=True, message="pod stopped")
    if is_terminal_pod(pod):
        obs = map_pod_status(pod, now=0.0, image_pull_grace_s=0.0)
        return to_observation(uid, obs)
    if not is_deleting(pod):
        deletes.append(PodDelete(pod_name_of(pod), "stop"))
    return AttemptObservation(attempt_uid=uid, state=state, message="pod is being deleted")
