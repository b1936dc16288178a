"""The reconcile seams' decisions as pure functions (no store, no clock, no network).

- ``desired_attempts``: a worker's (or the cluster's) complete desired set from its live attempts.
- ``read_reports``: what a reconcile's reports say of each worker's health, and the observations
  to fold (only of attempts the group asked about).
- ``register_effects``: registering a worker, reaping every other worker found at its address.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from iris.cluster.controller import round_kernel as kernel
from iris.cluster.controller.effects import Change, Effects, Event, EventKind, UpsertWorker
from iris.cluster.controller.snapshots import LiveAttempt, ObservationSnapshot
from iris.cluster.controller.worker_health import HealthEvent
from iris.cluster.types import DesiredGroup, GroupReport
from iris.rpc.enums import TERMINAL_TASK_STATES, StopReason, TaskState
from iris.rpc.models import AttemptObservation, DesiredAttempt, RegisterRequest, RunSpec


def gang_coordinator(leader_address: str, port: int) -> str:
    """``host:port`` of a gang's coordinator: task 0's worker host, the gang's port."""
    address = leader_address.split("://", 1)[-1].split("/", 1)[0]
    host = address.rpartition(":")[0] or address
    return f"{host}:{port}"


def desired_attempts(
    live: Sequence[LiveAttempt],
    run_spec: Callable[[LiveAttempt], RunSpec],
    gangs: Mapping[str, tuple[int, int]],
    leaders: Mapping[tuple[str, int], tuple[str, int]],
) -> list[DesiredAttempt]:
    """One desired attempt per live one: stop what was stopped or ended (with its reason), run a
    new ASSIGNED one with its spec (``run_spec``; a gang member's with its generation, size and
    coordinator), keep the rest running. ``gangs``: attempt uid -> (gang generation, size);
    ``leaders``: (job id, generation) -> the address of the worker running its task 0 and the
    gang's coordinator port."""
    desired: list[DesiredAttempt] = []
    for a in live:
        if a.stop_reason is not None or a.state in TERMINAL_TASK_STATES:
            desired.append(
                DesiredAttempt(
                    attempt_uid=a.attempt_uid,
                    intent="stop",
                    stop_reason=a.stop_reason or StopReason.JOB_TERMINATED,
                )
            )
        elif a.state is TaskState.ASSIGNED:
            spec = run_spec(a)
            if a.attempt_uid in gangs:
                generation, size = gangs[a.attempt_uid]
                update: dict[str, Any] = {"gang_generation": generation, "gang_size": size}
                leader = leaders.get((a.job_id, generation))
                if leader is not None:
                    update["gang_coordinator"] = gang_coordinator(*leader)
                spec = spec.model_copy(update=update)
            desired.append(DesiredAttempt(attempt_uid=a.attempt_uid, intent="run", spec=spec))
        else:
            desired.append(DesiredAttempt(attempt_uid=a.attempt_uid, intent="run"))
    return desired


def new_attempts(live: Iterable[LiveAttempt]) -> list[str]:
    """The attempts a desired set sends a spec for (the ones whose gang facts it needs)."""
    return [a.attempt_uid for a in live if a.state is TaskState.ASSIGNED and a.stop_reason is None]


def asked(group: DesiredGroup, report: GroupReport) -> dict[str, AttemptObservation]:
    """Never trust reports about attempts the group did not ask about."""
    wanted = {d.attempt_uid for d in group.attempts}
    return {o.attempt_uid: o for o in report.observations or () if o.attempt_uid in wanted}


@dataclass(frozen=True, slots=True)
class HealthReading:
    """What one worker's reconcile says of its health."""

    worker_id: str
    event: HealthEvent
    may_have_arrived: bool  # whether the call may have renewed the worker's fencing lease
    disk_pressure: bool | None = None  # None: the worker did not answer
    health_json: str | None = None  # the health it reported (kept as its last contact)


def read_reports(
    groups: Mapping[str, DesiredGroup], reports: Iterable[GroupReport]
) -> tuple[list[HealthReading], dict[str, AttemptObservation]]:
    """Each report of a worker the reconcile asked: its health reading and its observations.

    No answer is UNREACHABLE (the call may have arrived if the lease was renewed and the answer,
    not the connection, was lost); an answer is REACHED, or UNREACHABLE when the worker says it
    is unhealthy. Reports of workers not asked, and observations of attempts not asked, are
    ignored."""
    readings: list[HealthReading] = []
    observations: dict[str, AttemptObservation] = {}
    for report in reports:
        if report.worker_id is None or report.worker_id not in groups:
            continue
        group = groups[report.worker_id]
        renewed = group.renew_lease
        if report.observations is None or report.health is None:
            arrived = renewed and (report.may_have_arrived or report.observations is not None)
            readings.append(HealthReading(report.worker_id, HealthEvent.UNREACHABLE, arrived))
            continue
        health = report.health
        event = HealthEvent.REACHED if health.healthy else HealthEvent.UNREACHABLE
        readings.append(
            HealthReading(report.worker_id, event, renewed, health.disk_pressure, health.model_dump_json())
        )
        observations.update(asked(group, report))
    return readings, observations


def register_effects(
    worker_id: str,
    request: RegisterRequest,
    others_at_address: Mapping[str, ObservationSnapshot],
    now: float,
) -> Effects:
    """Register (or re-register) the worker; every other worker registered at the same address is
    gone (one address answers for one worker): it is reaped, its attempts lost."""
    event = Event(EventKind.WORKER_REGISTERED, f"registered at {request.address}", worker_id=worker_id)
    effects = Effects(changes=(Change((UpsertWorker(worker_id, request),), (event,)),))
    why = f"worker {worker_id} now answers at {request.address}"
    for old, snap in others_at_address.items():
        if old != worker_id:
            effects += kernel.reap_worker(snap, old, why, now)
    return effects
