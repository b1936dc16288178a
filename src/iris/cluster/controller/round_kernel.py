"""The controller's decisions as pure functions: snapshots in, ``Effects`` out (see effects.py).

One control round, as ``Controller.run_round`` drives it::

    snapshot = store.round_snapshot(...)          # pending work, workers, usage, deadlines
    plan     = plan_round(snapshot, ...)          # placements, timeouts, deadlines (+ victims)
    store.commit(plan.effects)  -> settle_jobs    # guarded; touched jobs roll up in the same txn
    desired  = live attempts -> backend.reconcile -> observations
    effects  = fold_observations(store.observation_snapshot(...), observations)
    store.commit(effects)       -> settle_jobs

Commands use the same kernels: ``stop_job`` is ``terminate_job``; reaping a worker is
``fold_observations`` of WORKER_FAILED for each of its attempts. Nothing here reads a clock,
a database or the network; ``now`` is an argument.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field, replace

from iris.cluster.controller.effects import (
    Assign,
    Change,
    DeleteWorker,
    Effects,
    Event,
    EventKind,
    MoveAttempt,
    MoveTask,
    Note,
    SetJob,
    Write,
)
from iris.cluster.controller.job_state import rollup_job_state
from iris.cluster.controller.scheduler import (
    PendingReason,
    Resources,
    RunningTask,
    TaskRequest,
    WorkerView,
    schedule,
)
from iris.cluster.controller.scheduler.gates import Budget
from iris.cluster.controller.scheduler.queue import PassScope
from iris.cluster.controller.snapshots import (
    AttemptUsage,
    JobRollup,
    JobSnapshot,
    ObservationSnapshot,
    PendingTask,
    RoundSnapshot,
    WorkerRow,
)
from iris.cluster.controller.task_state import (
    AttemptSnapshot,
    TaskSnapshot,
    apply_observation,
    retry_or_terminal,
    stop_attempt,
)
from iris.rpc.enums import (
    ACTIVE_TASK_STATES,
    TERMINAL_JOB_STATES,
    TERMINAL_TASK_STATES,
    JobState,
    StopReason,
    TaskState,
)
from iris.rpc.models import TIMEOUT_EXIT_CODE, AttemptObservation, JobSpec

GANG_WAIT = "waiting for the other members of its gang to stop"
# Not worth a log line each: the common path, and kills (the job's own line says why).
_QUIET_STATES = (TaskState.BUILDING, TaskState.RUNNING, TaskState.SUCCEEDED, TaskState.KILLED)


def job_of(task_id: str) -> str:
    return task_id.rsplit("/", 1)[0]


# ---------------------------------------------------------------- placement


@dataclass(frozen=True)
class RoundPlan:
    """What a scheduling pass decided (at ``now``), and what the autoscaler and dashboard learn.

    ``unplaced`` is None where no Iris scheduler ran (KUBERNETES).
    """

    effects: Effects
    now: float
    unplaced: list[TaskRequest] | None = field(default_factory=list[TaskRequest])
    pending: dict[str, PendingReason] = field(default_factory=dict[str, PendingReason])
    # Victims to stop (victim task id -> preemptor task id): ``preempt`` decides their moves.
    victims: dict[str, str] = field(default_factory=dict[str, str])
    # Submission times of the tasks considered (task id -> time), for dispatch latency.
    submitted_at: dict[str, float] = field(default_factory=dict[str, float])
    placed: frozenset[str] = frozenset()  # the tasks given a worker
    waiting_gangs: frozenset[str] = frozenset()  # gangs whose earlier members are still stopping
    # WORKER: what the pending queue let this pass see (the controller records it once committed).
    scope: PassScope | None = None
    # ``store.writes_so_far`` when the pass's snapshot was read (see ``store.commit``).
    read_at: int | None = None
    # The cpu cores each user's running work held when the pass read the fleet (fair share).
    cores_by_user: dict[str, float] | None = None
    # Seconds the scheduler spent in each stage (scheduler.kernel.STAGES), for /metrics.
    stage_seconds: dict[str, float] = field(default_factory=dict[str, float], compare=False)

    def with_effects(self, more: Effects) -> RoundPlan:
        return replace(self, effects=self.effects + more)


def fleet_views(
    workers: Sequence[WorkerRow], usage: Sequence[AttemptUsage], schedulable: AbstractSet[str]
) -> tuple[list[WorkerView], list[RunningTask]]:
    """Workers with the capacity their unreleased attempts hold, and those attempts as kernel inputs."""
    used: dict[str, list[int]] = {}
    running: list[RunningTask] = []
    for u in usage:
        acc = used.setdefault(u.worker_id, [0, 0, 0, 0])
        acc[0] += u.resources.cpu_millicores
        acc[1] += u.resources.memory_bytes
        acc[2] += u.resources.disk_bytes
        acc[3] += u.resources.device_count
        running.append(
            RunningTask(
                task_id=u.task_id,
                job_id=u.job_id,
                worker_id=u.worker_id,
                resources=u.resources,
                band=u.priority,
                started_at=u.started_at or 0.0,
                group_by=u.group_by,
                user=u.user,
                # capacity already being freed: never a victim twice
                stopping=u.stop_reason is not None or u.state not in ACTIVE_TASK_STATES,
            )
        )
    views: list[WorkerView] = []
    for w in workers:
        cap = Resources.from_spec(w.capacity)
        u = used.get(w.worker_id, [0, 0, 0, 0])
        views.append(
            WorkerView(
                worker_id=w.worker_id,
                capacity=cap,
                used=Resources(
                    cpu_millicores=u[0],
                    memory_bytes=u[1],
                    disk_bytes=u[2],
                    device_type=cap.device_type,
                    device_variant=cap.device_variant,
                    device_count=u[3],
                ),
                attributes=w.attributes,
                schedulable=w.worker_id in schedulable,
            )
        )
    return views, running


def task_requests(
    pending: Sequence[PendingTask], specs: Mapping[str, JobSpec], stopping_gangs: AbstractSet[str]
) -> tuple[list[TaskRequest], list[PendingTask]]:
    """Scheduler inputs for pending tasks, and the gang members that wait for their gang to stop."""
    by_job: dict[str, int] = {}
    for p in pending:
        by_job[p.job_id] = by_job.get(p.job_id, 0) + 1
    requests: list[TaskRequest] = []
    waiting: list[PendingTask] = []
    for p in pending:
        if p.group_by and p.job_id in stopping_gangs:
            waiting.append(p)  # members still stopping: the gang moves as one
            continue
        requests.append(
            TaskRequest(
                task_id=p.task_id,
                job_id=p.job_id,
                user=p.user,
                resources=p.resources,
                constraints=tuple(specs[p.job_id].constraints),
                preferences=tuple(specs[p.job_id].preferences),
                band=p.priority,
                depth=p.depth,
                root_submitted_at=p.root_submitted_at,
                submitted_at=p.submitted_at,
                group_by=p.group_by,
                # A gang places its unfinished tasks together (members that succeeded stay done).
                gang_size=by_job[p.job_id] if p.group_by else 1,
            )
        )
    return requests, waiting


def plan_round(
    snap: RoundSnapshot,
    specs: Mapping[str, JobSpec],
    schedulable: AbstractSet[str],
    now: float,
    *,
    budgets: Mapping[str, Budget] | None = None,
    recent_usage: Mapping[str, float] | None = None,
) -> RoundPlan:
    """WORKER: place pending tasks, expire deadlines and execution timeouts. ``budgets`` and
    ``recent_usage``: see ``scheduler.schedule``."""
    effects = plan_deadlines(snap, specs, now)
    if not snap.pending:
        return RoundPlan(effects=effects, now=now)
    views, running = fleet_views(snap.workers, snap.usage, schedulable)
    requests, waiting = task_requests(snap.pending, specs, snap.stopping_gangs)
    result = schedule(requests, views, running, budgets=budgets, recent_usage=recent_usage)
    cores: dict[str, float] = {}
    for t in running:
        if not t.stopping:
            cores[t.user] = cores.get(t.user, 0.0) + t.resources.cpu_millicores / 1000
    by_id = {p.task_id: p for p in snap.pending}
    placed = {t for t, _ in result.assignments}
    changes: list[Change] = []
    gangs: dict[str, list[Write]] = {}
    for task_id, worker_id in result.assignments:
        p = by_id[task_id]
        assign = Assign(task_id, p.job_id, p.version, worker_id, gang=p.group_by is not None)
        if p.group_by:
            gangs.setdefault(p.job_id, []).append(assign)  # a gang is placed whole or not at all
        else:
            changes.append(Change((assign,)))
    changes += [Change(tuple(members)) for members in gangs.values()]
    notes = [
        Note(t, TaskState.PENDING.value, r.message)
        for t, r in result.pending.items()
        if by_id[t].pending_reason != r.message
    ]
    notes += [
        Note(p.task_id, TaskState.PENDING.value, GANG_WAIT) for p in waiting if p.pending_reason != GANG_WAIT
    ]
    victims = {pre.victim_task_id: pre.preemptor_task_id for pre in result.preemptions}
    return RoundPlan(
        effects=effects + Effects(changes=tuple(changes), notes=tuple(notes)),
        now=now,
        unplaced=[r for r in requests if r.task_id not in placed],
        pending=dict(result.pending),
        victims=victims,
        submitted_at={p.task_id: p.submitted_at for p in snap.pending},
        placed=frozenset(placed),
        waiting_gangs=frozenset(p.job_id for p in waiting),
        cores_by_user=cores,
        stage_seconds=result.stage_seconds,
    )


def plan_pod_dispatch(snap: RoundSnapshot, specs: Mapping[str, JobSpec], now: float) -> Effects:
    """KUBERNETES: Kueue places the work, so every pending task gets its attempt (its Pod) at once.

    A gang is dispatched as one pod group, once none of its previous members still runs.
    """
    effects = plan_deadlines(snap, specs, now)
    changes: list[Change] = []
    gangs: dict[str, list[Write]] = {}
    for p in snap.pending:
        if p.job_id in snap.stopping_gangs:
            continue
        assign = Assign(p.task_id, p.job_id, p.version, None, gang=p.group_by is not None)
        if p.group_by:
            gangs.setdefault(p.job_id, []).append(assign)
        else:
            changes.append(Change((assign,)))
    changes += [Change(tuple(members)) for members in gangs.values()]
    return effects + Effects(changes=tuple(changes))


def plan_deadlines(snap: RoundSnapshot, specs: Mapping[str, JobSpec], now: float) -> Effects:
    """Execution timeouts (RUNNING too long: FAILED, no retry) and scheduling deadlines
    (never started in time: UNSCHEDULABLE)."""
    changes: list[Change] = []
    for task, attempt in snap.timed_out:
        if attempt is None or task.state is not TaskState.RUNNING:
            continue
        timeout = specs[job_of(task.task_id)].timeout_s or 0.0
        stopped = stop_attempt(task, attempt, StopReason.TASK_TIMEOUT, now).attempt
        failed = task._replace(
            state=TaskState.FAILED,
            finished_at=now,
            exit_code=TIMEOUT_EXIT_CODE,
            error=f"timed out after {timeout:g}s",
        )
        changes.append(Change((MoveAttempt(attempt, stopped), MoveTask(task, failed))))
    for task, attempt, reason in snap.expired:
        if task.state not in (TaskState.PENDING, TaskState.ASSIGNED):
            continue
        writes: list[Write] = []
        if task.state is TaskState.ASSIGNED and attempt is not None and not attempt.released:
            # Placed but never started (a pod Kueue never admitted): take it back.
            writes.append(
                MoveAttempt(attempt, stop_attempt(task, attempt, StopReason.JOB_TERMINATED, now).attempt)
            )
        error = f"scheduling timeout: {reason or 'it never fit'}"
        writes.append(
            MoveTask(task, task._replace(state=TaskState.UNSCHEDULABLE, finished_at=now, error=error))
        )
        changes.append(Change(tuple(writes)))
    return Effects(changes=tuple(changes), urgent=bool(changes))


def preempt(
    victims: Mapping[str, str],
    tasks: Mapping[str, TaskSnapshot],
    attempts: Mapping[str, AttemptSnapshot],
    now: float,
) -> Effects:
    """Stop each victim (task id -> the preemptor's task id) that still runs; charge its budget."""
    changes: list[Change] = []
    for victim, preemptor in victims.items():
        task = tasks.get(victim)
        if task is None or task.current_attempt_uid is None or task.state not in ACTIVE_TASK_STATES:
            continue
        attempt = attempts.get(task.current_attempt_uid)
        if attempt is None:
            continue
        stopped = stop_attempt(task, attempt, StopReason.PREEMPTED, now).attempt
        moved = retry_or_terminal(
            task, TaskState.PREEMPTED, never_started=attempt.state is TaskState.ASSIGNED, now=now
        )
        why = f"preempted by {preemptor}"
        event = Event(EventKind.TASK_PREEMPTED, why, job_of(victim), victim, attempt.attempt_uid)
        changes.append(
            Change((MoveAttempt(attempt, stopped), MoveTask(task, moved, pending_reason=why)), (event,))
        )
    return Effects(changes=tuple(changes), urgent=bool(changes))


# ---------------------------------------------------------------- observations


def fold_observations(
    snap: ObservationSnapshot, observations: Iterable[AttemptObservation], now: float
) -> Effects:
    """Fold what the backend observed into attempts and tasks: one change per task."""
    by_task: dict[str, list[AttemptObservation]] = {}
    for obs in observations:
        attempt = snap.attempts.get(obs.attempt_uid)
        if attempt is not None and attempt.task_id in snap.tasks:
            by_task.setdefault(attempt.task_id, []).append(obs)
    changes: list[Change] = []
    notes: list[Note] = []
    urgent = False
    for task_id, batch in by_task.items():
        before = task = snap.tasks[task_id]
        writes: list[Write] = []
        events: list[Event] = []
        pending_reason: str | None = None
        for obs in batch:
            attempt = snap.attempts[obs.attempt_uid]
            tr = apply_observation(task, attempt, obs, now)
            if tr.attempt != attempt or (obs.message and attempt.state is TaskState.ASSIGNED):
                writes.append(MoveAttempt(attempt, tr.attempt, message=obs.message))
                urgent |= tr.attempt.released != attempt.released or tr.attempt.state in TERMINAL_TASK_STATES
            if tr.task.state is not task.state:
                urgent |= tr.task.state in TERMINAL_TASK_STATES or tr.task.state is TaskState.PENDING
                if tr.task.state is TaskState.PENDING:
                    pending_reason = (
                        f"retrying after {tr.attempt.state.value.lower()}: {tr.task.error or ''}".strip(": ")
                    )
                events.append(
                    Event(
                        EventKind.of_task(tr.task.state.value),
                        tr.task.error or tr.task.state.value,
                        job_of(task_id),
                        task_id,
                        attempt.attempt_uid,
                        attempt.worker_id,
                    )
                )
            elif obs.message and tr.task.state is TaskState.ASSIGNED and tr.task == task:
                notes.append(Note(task_id, TaskState.ASSIGNED.value, obs.message))
            task = tr.task
        if task != before:
            writes.append(MoveTask(before, task, pending_reason=pending_reason))
        if writes:
            changes.append(Change(tuple(writes), tuple(events)))
    return Effects(changes=tuple(changes), notes=tuple(notes), urgent=urgent)


def lost_worker_observations(snap: ObservationSnapshot, worker_id: str, why: str) -> list[AttemptObservation]:
    """What reaping a worker means for each attempt it still held: lost with it."""
    return [
        AttemptObservation(
            attempt_uid=uid,
            state=TaskState.WORKER_FAILED,
            error=f"worker {worker_id} was lost: {why}",
            runtime_released=True,
        )
        for uid in snap.attempts
    ]


def reap_worker(snap: ObservationSnapshot, worker_id: str, why: str, now: float) -> Effects:
    """A worker is gone: its attempts are lost (their tasks retry elsewhere) and its row deleted."""
    lost = fold_observations(snap, lost_worker_observations(snap, worker_id, why), now)
    gone = Change((DeleteWorker(worker_id),), (Event(EventKind.WORKER_REAPED, why, worker_id=worker_id),))
    return lost + Effects(changes=(gone,), urgent=True)


# ---------------------------------------------------------------- jobs


def terminate_job(
    js: JobSnapshot,
    state: JobState,
    error: str | None,
    reason: StopReason,
    now: float,
    *,
    exit_code: int | None = None,
    tasks: Mapping[str, TaskSnapshot] | None = None,
) -> Change:
    """Make a job terminal and kill its live tasks (their attempts stop with ``reason``).

    ``tasks`` are the job's tasks as an earlier step of the same decision left them (to chain on).
    """
    current = dict(tasks) if tasks is not None else {t.task_id: t for t in js.tasks}
    originals = {t.task_id: t for t in js.tasks}
    writes: list[Write] = []
    for task_id, task in current.items():
        if task.state in TERMINAL_TASK_STATES:
            continue
        attempt = js.attempts.get(task.current_attempt_uid or "")
        if attempt is not None and not attempt.released and attempt.state not in TERMINAL_TASK_STATES:
            writes.append(MoveAttempt(attempt, stop_attempt(task, attempt, reason, now).attempt))
        current[task_id] = task._replace(
            state=TaskState.KILLED, finished_at=now, error=task.error or "killed"
        )
    for task_id, task in current.items():
        if task != originals[task_id]:
            writes.append(MoveTask(originals[task_id], task))
    started = js.job.started_at
    if started is None:
        starts = [t.started_at for t in current.values() if t.started_at is not None]
        started = min(starts) if starts else None
    writes.append(
        SetJob(
            js.job.job_id,
            js.job.state,
            state,
            started_at=started,
            finished_at=now,
            error=error,
            exit_code=exit_code,
        )
    )
    event = Event(EventKind.of_job(state), error or state.value, js.job.job_id)
    return Change(tuple(writes), (event,))


def settle_job(js: JobSnapshot, now: float) -> Change | None:
    """After its tasks moved: a gang moves as one, then the job's state rolls up from its tasks."""
    if js.job.state in TERMINAL_JOB_STATES:
        return None
    tasks = {t.task_id: t for t in js.tasks}
    gang_writes: list[Write] = []
    if js.coscheduled:
        gang_writes = _gang_follow_up(js, tasks, now)
    counts: dict[TaskState, int] = {}
    for t in tasks.values():
        counts[t.state] = counts.get(t.state, 0) + 1
    new = rollup_job_state(
        js.job.state,
        counts,
        max_task_failures=js.max_task_failures,
        ever_started=js.job.started_at is not None,
    )
    if new in TERMINAL_JOB_STATES:
        exit_code, error = _job_outcome(new, tasks.values())
        attempts_moved = [w for w in gang_writes if isinstance(w, MoveAttempt)]
        js_after = _with_attempts(js, attempts_moved)
        finish = terminate_job(
            js_after, new, error, StopReason.JOB_TERMINATED, now, exit_code=exit_code, tasks=tasks
        )
        return Change(tuple(attempts_moved) + finish.writes, finish.events)
    writes = list(gang_writes)
    writes += [MoveTask(t, tasks[t.task_id]) for t in js.tasks if tasks[t.task_id] != t]
    if new is not js.job.state:
        started = (js.job.started_at or now) if new is JobState.RUNNING else None
        writes.append(SetJob(js.job.job_id, js.job.state, new, started_at=started))
    return Change(tuple(writes)) if writes else None


def _with_attempts(js: JobSnapshot, moved: Sequence[MoveAttempt]) -> JobSnapshot:
    if not moved:
        return js
    attempts = dict(js.attempts)
    for m in moved:
        attempts[m.after.attempt_uid] = m.after
    return replace(js, attempts=attempts)


def _gang_follow_up(js: JobSnapshot, tasks: dict[str, TaskSnapshot], now: float) -> list[Write]:
    """A lost member bounces its running siblings (back to PENDING together); a dead one ends them.

    Updates ``tasks`` in place; returns the attempt stops (task moves are written by the caller).
    """
    states = [t.state for t in tasks.values()]
    dead = any(s in (TaskState.FAILED, TaskState.WORKER_FAILED, TaskState.PREEMPTED) for s in states)
    retrying = TaskState.PENDING in states and any(s in ACTIVE_TASK_STATES for s in states)
    if not dead and not retrying:
        return []
    writes: list[Write] = []
    why = "a member of its gang failed" if dead else "its gang is being rescheduled together"
    for task_id, task in list(tasks.items()):
        if task.state not in ACTIVE_TASK_STATES:
            continue
        attempt = js.attempts.get(task.current_attempt_uid or "")
        if attempt is not None:
            reason = StopReason.JOB_TERMINATED if dead else StopReason.PREEMPTED
            stopped = stop_attempt(task, attempt, reason, now).attempt
            writes.append(MoveAttempt(attempt, stopped._replace(state=TaskState.COSCHED_FAILED, error=why)))
        if dead:
            tasks[task_id] = task._replace(state=TaskState.COSCHED_FAILED, finished_at=now, error=why)
        else:
            tasks[task_id] = task._replace(state=TaskState.PENDING)
    return writes


def _job_outcome(state: JobState, tasks: Iterable[TaskSnapshot]) -> tuple[int | None, str | None]:
    if state is JobState.SUCCEEDED:
        return 0, None
    for t in sorted(tasks, key=lambda t: int(t.task_id.rsplit("/", 1)[1])):
        if t.state in (TaskState.FAILED, TaskState.UNSCHEDULABLE, TaskState.WORKER_FAILED):
            exit_code = t.exit_code if t.exit_code not in (None, 0) else 1
            return exit_code, f"task {t.task_id.rsplit('/', 1)[1]}: {t.error or t.state.value.lower()}"
    return None, None


def settle_by_counts(rollups: Iterable[JobRollup], now: float) -> tuple[Effects, list[str]]:
    """Roll jobs up from their task-state histograms; returns the jobs that need their full
    snapshot (``settle_job``): gangs, and jobs whose roll-up ends them with live tasks to kill or
    a failed task to name (a job whose tasks all succeeded ends from its counts alone)."""
    changes: list[Change] = []
    full: list[str] = []
    for r in rollups:
        new = rollup_job_state(
            r.job.state,
            r.counts,
            max_task_failures=r.max_task_failures,
            ever_started=r.job.started_at is not None,
        )
        if new is JobState.SUCCEEDED and not r.coscheduled:
            # Every task succeeded: nothing to kill and nothing to read (a full snapshot of a
            # 10,000-task job is 10,000 rows); the same change ``settle_job`` would make.
            job = r.job if r.job.started_at is not None else replace(r.job, started_at=r.first_task_start)
            done = JobSnapshot(job, (), {}, r.max_task_failures, coscheduled=False)
            changes.append(terminate_job(done, new, None, StopReason.JOB_TERMINATED, now, exit_code=0))
        elif r.coscheduled or new in TERMINAL_JOB_STATES:
            full.append(r.job.job_id)
        elif new is not r.job.state:
            started = (r.job.started_at or now) if new is JobState.RUNNING else None
            changes.append(Change((SetJob(r.job.job_id, r.job.state, new, started_at=started),)))
    return Effects(changes=tuple(changes)), full


def settle_jobs(snaps: Iterable[JobSnapshot], now: float) -> Effects:
    changes = [c for c in (settle_job(js, now) for js in snaps) if c is not None]
    return Effects(changes=tuple(changes), urgent=bool(changes))


def kill_descendants(snaps: Iterable[JobSnapshot], now: float) -> Effects:
    """Live sub-jobs of a job that just ended are killed with it."""
    changes = tuple(
        terminate_job(js, JobState.KILLED, "parent job terminated", StopReason.JOB_TERMINATED, now)
        for js in snaps
        if js.job.state not in TERMINAL_JOB_STATES
    )
    return Effects(changes=changes, urgent=bool(changes))


def is_quiet(state: TaskState) -> bool:
    """Task states not worth a log line (the common path)."""
    return state in _QUIET_STATES
