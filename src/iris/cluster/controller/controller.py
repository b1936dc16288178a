"""The controller: one control loop plus thin commands, over pure kernels and a guarded store.

A round (``run_round``) is snapshot -> pure decisions -> typed effects -> guarded commit, twice:
``plan_round`` reads one frozen ``store.round_snapshot`` and asks ``round.plan_round`` where
pending work goes (and what times out); ``apply_round`` commits those effects. Then the backend
reconciles the desired attempts, and what it observed is folded by ``round.fold_observations``
and committed the same way. ``store.commit`` checks every write against the version or state it
was decided from, so a command that lands between a round's snapshot and its commit (a stop, a
worker reaped) wins, and the round's stale decision is dropped and re-decided next round.
Commands (submit, stop, register, reap) build effects from a snapshot read inside their own
transaction and go through the same commit. Touched jobs roll up (``round.settle_*``) inside the
commit's transaction. The backend kind decides which seams run: the Iris scheduler, worker
reconcile and worker health for WORKER; Pod reconciliation for KUBERNETES.
"""

from __future__ import annotations

import logging
import secrets
import sqlite3
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from iris.cluster.backends.worker_daemon import WorkerDaemonBackend, WorkerRpcClient
from iris.cluster.controller import round_kernel as kernel
from iris.cluster.controller import store
from iris.cluster.controller.auth import Authenticator
from iris.cluster.controller.autoscaler import Autoscaler, demand_from_requests, slice_usage_from_workers
from iris.cluster.controller.backend import (
    AttemptRef,
    BackendDescriptor,
    BackendKind,
    DesiredGroup,
    GroupReport,
    TaskBackend,
    TaskTarget,
)
from iris.cluster.controller.budgets import Budgets
from iris.cluster.controller.bundles import BundleStore
from iris.cluster.controller.capacity import dry_run_from_groups, workers_misfit
from iris.cluster.controller.cordons import (
    Cordon,
    Mode,
    QuarantineWindow,
    delete_cordon,
    infrastructure_failure,
    load_cordons,
    save_cordon,
)
from iris.cluster.controller.db import ControllerDB
from iris.cluster.controller.effects import (
    Applied,
    Assign,
    Change,
    Effects,
    Event,
    EventKind,
    InsertJob,
    MoveTask,
    SetJob,
    UpsertWorker,
)
from iris.cluster.controller.job_waiters import JobWaiters
from iris.cluster.controller.logstore import LogStore
from iris.cluster.controller.logstore.pod_collector import PodLogCollector
from iris.cluster.controller.metrics import ControllerMetrics
from iris.cluster.controller.round_kernel import RoundPlan
from iris.cluster.controller.scheduler import PendingReason, Resources, TaskRequest, explain
from iris.cluster.controller.scheduler.fairshare import UsageLedger
from iris.cluster.controller.scheduler.gates import admission_refusal
from iris.cluster.controller.scheduler.queue import PassScope, PendingQueue
from iris.cluster.controller.secrets import KEY_FILE, SecretStore, load_or_create_secret_key
from iris.cluster.controller.worker_health import HealthEvent, WorkerHealthTracker, fence_after
from iris.cluster.types import JobName
from iris.rpc.enums import (
    ACTIVE_TASK_STATES,
    TERMINAL_JOB_STATES,
    TERMINAL_TASK_STATES,
    JobState,
    PriorityBand,
    StopReason,
    TaskState,
    WorkerStatus,
)
from iris.rpc.errors import (
    AlreadyExists,
    FailedPrecondition,
    InsufficientStorage,
    InvalidArgument,
    NotFound,
    NotImplementedForBackend,
    PermissionDenied,
)
from iris.rpc.gang import gang_port
from iris.rpc.models import (
    AttemptObservation,
    DesiredAttempt,
    EndpointInfo,
    EndpointRegistration,
    JobSpec,
    RegisterRequest,
    RegisterResponse,
    ResourceSpec,
    RunSpec,
    UserBudget,
    UserBudgetInfo,
)
from iris.rpc.signing import load_or_create_key, new_master_key, worker_secret

log = logging.getLogger("iris.controller")
DISK_FULL_LOG_INTERVAL_S = 30.0  # a full state disk is logged once per this many seconds
SPEC_CACHE_SIZE = 10_000  # parsed job specs (and run templates) kept in memory
# A run template carries the job's token (valid for days): rebuilt this often, so a retry long
# after the job started still gets a fresh one.
RUN_TEMPLATE_MAX_AGE_S = 3600.0


class TimeSeries:
    """A ring of periodic task-count samples for the dashboard's charts (pending, running, throughput)."""

    def __init__(self, interval_s: float = 2.0, capacity: int = 900) -> None:
        self.interval_s = interval_s
        self.points: deque[dict[str, float]] = deque(maxlen=capacity)
        self._next = 0.0

    def due(self, now: float) -> bool:
        return now >= self._next

    def sample(self, now: float, counts: dict[str, int]) -> None:
        self._next = now + self.interval_s
        self.points.append(
            {
                "ts": now,
                "pending": counts.get("PENDING", 0),
                "running": sum(counts.get(s, 0) for s in ("ASSIGNED", "BUILDING", "RUNNING")),
                "succeeded": counts.get("SUCCEEDED", 0),
                "failed": sum(
                    counts.get(s, 0) for s in ("FAILED", "WORKER_FAILED", "UNSCHEDULABLE", "COSCHED_FAILED")
                ),
                "killed": sum(counts.get(s, 0) for s in ("KILLED", "PREEMPTED")),
            }
        )


class Controller:
    def __init__(
        self,
        descriptor: BackendDescriptor,
        db: ControllerDB,
        *,
        controller_url: str = "",
        autoscaler: Autoscaler | None = None,
        autoscale_interval_s: float = 1.0,
        backend: TaskBackend | None = None,
        auth: Authenticator | None = None,
        tick_interval_s: float = 1.0,
        worker_grace_s: float = 10.0,
        clock: Callable[[], float] = time.time,
        bundle_dir: Path | None = None,
        worker_rpc_key: bytes | None = None,
        log_dir: Path | None = None,
        default_task_image: str | None = None,
        secrets: SecretStore | None = None,
    ) -> None:
        self._descriptor = descriptor
        # ``defaults.task_image``: the image of every job that names none (None: plain processes).
        self.default_task_image = default_task_image
        # Each worker gets its secret derived from this key at registration; the WORKER backend
        # signs every call with it (see create_controller).
        self.worker_rpc_key = worker_rpc_key or new_master_key()
        self.db = db
        self.bundles = BundleStore(bundle_dir)
        # Task logs and usage, kept after their workers are gone (written by the API, not this loop).
        self.logs = LogStore(log_dir)
        # Per-user secrets (encrypted at rest), and what the cluster config adds to every job.
        self.secrets = secrets or SecretStore(db)
        self.task_env: dict[str, str] = {}  # defaults.task_env, under each job's own env
        self.forward_env: list[str] = []  # forward_env: what clients copy from the submitter's env
        # Cordoned and draining workers take no new work (controller/cordons.py).
        with db.read() as cur:
            self.cordons: dict[str, Cordon] = load_cordons(cur)
        self.quarantine = QuarantineWindow()
        self.drain_grace_s = 3600.0
        self._pod_logs: PodLogCollector | None = None
        self.controller_url = controller_url
        self.autoscaler = autoscaler
        self.autoscale_interval_s = autoscale_interval_s
        self.backend = backend
        self.tick_interval_s = tick_interval_s
        self.clock = clock
        self.started_at = clock()
        self.health = WorkerHealthTracker(grace_s=worker_grace_s)
        self.auth = auth or Authenticator()
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._signal_lock = threading.Lock()
        self._nudged: set[str] = set()
        self._dirty_workers: set[str] = set()
        self._spec_cache: OrderedDict[str, JobSpec] = OrderedDict()
        self._shapes: list[tuple[str, ResourceSpec, dict[str, str]]] | None = None
        self._run_templates: dict[str, tuple[RunSpec, float]] = {}
        self._last_full_round = 0.0
        self._disk_full_logged = float("-inf")
        self._last_timeout_scan = 0.0
        self._next_autoscale = 0.0
        # WORKER: which pending tasks a pass looks at, so a round's work grows with what changed
        # (new work, room for parked work), not with the queue (scheduler/queue.py).
        self._queue = PendingQueue() if descriptor.kind is BackendKind.WORKER else None
        self._queue_lock = threading.Lock()
        self._last_pass_s = 0.0  # what the last queued pass cost (snapshot and kernel)
        self.last_pending: dict[str, PendingReason] = {}
        # Per-user budgets (the scheduler's first gate) and recent usage (fair share among users).
        self.budgets = Budgets(db)
        self.usage = UsageLedger()
        self.timeseries = TimeSeries()
        # API requests waiting for jobs to end, woken by the commit that ends each.
        self.job_waiters = JobWaiters()
        self.metrics = ControllerMetrics()
        self.round_stats: dict[str, float] = {
            "rounds": 0,
            "last_round_ms": 0.0,
            "last_schedule_ms": 0.0,
            "last_pass_tasks": 0,  # pending tasks the last scheduling pass read
            "last_reconcile_ms": 0.0,
            "dropped_changes": 0,
            "refused_changes": 0,
        }
        if descriptor.kind is BackendKind.WORKER:
            now = clock()
            with db.read() as cur:
                for worker in store.list_workers(cur):
                    # Persisted workers are alive until a reconcile proves otherwise.
                    self.health.register(worker.worker_id, now)

    # ------------------------------------------------------------ contract

    @property
    def backend_descriptor(self) -> BackendDescriptor:
        """Set at construction and never replaced: another kind means another controller."""
        return self._descriptor

    @property
    def autoscaler_configured(self) -> bool:
        return self._descriptor.kind is BackendKind.WORKER and self.autoscaler is not None

    # ------------------------------------------------------------ lifecycle

    def set_url(self, url: str) -> None:
        """The address tasks use to reach this controller (known once the API socket is bound)."""
        self.controller_url = url
        if self.backend is not None:
            self.backend.set_controller_url(url)
        if self.autoscaler is not None:
            self.autoscaler.controller_url = url

    def start(self) -> None:
        if self._thread is not None:
            return
        if self.backend is not None:
            self.backend.watch(self.wake)  # substrate events wake the loop; the tick stays the safety net
        self._thread = threading.Thread(target=self._loop, name="iris-control-loop", daemon=True)
        self._thread.start()
        self.logs.start()
        if self._descriptor.kind is BackendKind.KUBERNETES and self.backend is not None:
            self._pod_logs = PodLogCollector(self, self.logs).start()

    def stop(self) -> None:
        self._stopping.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
            self._thread = None
        if self._pod_logs is not None:
            self._pod_logs.stop()
        if self.backend is not None:
            self.backend.close()
        self.logs.close()

    @property
    def pod_logs(self) -> PodLogCollector | None:
        """The collector that copies pods' logs into the log store (KUBERNETES only)."""
        return self._pod_logs

    def wake(self) -> None:
        self._wake.set()

    def _loop(self) -> None:
        while not self._stopping.is_set():
            timeout = max(0.0, self._last_full_round + self.tick_interval_s - self.clock())
            self._wake.wait(timeout=timeout)
            self._wake.clear()
            if self._stopping.is_set():
                return
            with self._signal_lock:
                nudged, self._nudged = self._nudged, set()
            full = self.clock() >= self._last_full_round + self.tick_interval_s
            try:
                if self.run_round(full=full, nudged=nudged):
                    self._wake.set()
            except InsufficientStorage as exc:  # one line per interval, not a traceback per round
                if self.clock() >= self._disk_full_logged + DISK_FULL_LOG_INTERVAL_S:
                    self._disk_full_logged = self.clock()
                    log.error("control rounds are not writing: %s", exc.message)
                self._stopping.wait(1.0)
            except Exception:  # the loop must survive any single bad round
                log.exception("control round failed")
                self._stopping.wait(0.2)

    # ------------------------------------------------------------ the round

    def run_round(self, *, full: bool = True, nudged: Iterable[str] = ()) -> bool:
        """One control round; returns True when it changed something worth another round at once."""
        t0 = time.perf_counter()
        now = self.clock()
        if full:
            self._last_full_round = now
        self._housekeeping(now)
        if self.timeseries.due(now):
            with self.db.read() as cur:
                self.timeseries.sample(now, store.task_counts(cur))
        changed = self.apply_round(self.plan_round(now))
        self.round_stats["last_schedule_ms"] = (time.perf_counter() - t0) * 1000
        descriptor = self._descriptor
        if descriptor.kind is BackendKind.WORKER:
            with self._signal_lock:
                targets, self._dirty_workers = self._dirty_workers | set(nudged), set()
            t2 = time.perf_counter()
            changed |= self._reconcile_workers(None if full else targets)
            self.round_stats["last_reconcile_ms"] = (time.perf_counter() - t2) * 1000
            if full or targets:
                self.metrics.reconcile_round_seconds.observe(time.perf_counter() - t2)
            self._update_worker_health()
            self._drain(self.clock())
            self._trigger_autoscale()
        if descriptor.kind is BackendKind.KUBERNETES:
            t3 = time.perf_counter()
            changed |= self._reconcile_pods()
            self.metrics.reconcile_round_seconds.observe(time.perf_counter() - t3)
        self.round_stats["rounds"] += 1
        self.round_stats["last_round_ms"] = (time.perf_counter() - t0) * 1000
        return changed

    def plan_round(self, now: float | None = None) -> RoundPlan:
        """Read the round's snapshot and decide (writes nothing): placements, deadlines, preemptions."""
        now = self.clock() if now is None else now
        started = time.perf_counter()
        worker_kind = self._descriptor.kind is BackendKind.WORKER
        deadlines = now - self._last_timeout_scan >= 0.25
        if deadlines:
            self._last_timeout_scan = now
        queue = self._queue
        scope: PassScope | None = None
        with self.db.read() as cur:
            read_at = store.writes_so_far(cur)
            if queue is not None:
                snap, scope = self._queued_snapshot(queue, cur, now, deadlines)
            else:
                snap = store.round_snapshot(cur, now, with_fleet=False, with_deadlines=deadlines)
        self.round_stats["last_pass_tasks"] = len(snap.pending)
        if not (snap.pending or snap.timed_out or snap.expired):
            return RoundPlan(effects=Effects(), now=now, unplaced=[] if worker_kind else None, scope=scope)
        specs = self._specs_for(
            {p.job_id: p.spec_json for p in snap.pending},
            [kernel.job_of(t.task_id) for t, _ in snap.timed_out],
        )
        if worker_kind:
            plan = kernel.plan_round(
                snap,
                specs,
                self._healthy(snap.workers),
                now,
                budgets=self.budgets.effective(),
                recent_usage=self.usage.usage(now),
            )
            if plan.cores_by_user is not None:
                self.usage.observe(now, plan.cores_by_user)
            for stage, seconds in plan.stage_seconds.items():
                self.metrics.scheduler_stage_seconds.labels(stage).observe(seconds)
        else:
            plan = RoundPlan(
                effects=kernel.plan_pod_dispatch(snap, specs, now),
                now=now,
                unplaced=None,
                submitted_at={p.task_id: p.submitted_at for p in snap.pending},
            )
        plan = replace(plan, read_at=read_at)
        if scope is not None:
            plan = replace(plan, scope=scope)
            self._last_pass_s = time.perf_counter() - started
        if plan.victims:
            with self.db.read() as cur:
                tasks = store.task_snapshots(cur, plan.victims)
                attempts = store.attempt_snapshots(
                    cur, [t.current_attempt_uid for t in tasks.values() if t.current_attempt_uid]
                )
            plan = plan.with_effects(kernel.preempt(plan.victims, tasks, attempts, now))
        if snap.pending:
            self.metrics.scheduling_pass_seconds.observe(time.perf_counter() - started)
        return plan

    def _healthy(self, workers: Iterable[store.WorkerRow]) -> set[str]:
        """The workers new work may go to: healthy and not cordoned or draining."""
        cordons = self.cordons
        return {
            w.worker_id
            for w in workers
            if self.health.status(w.worker_id) is WorkerStatus.HEALTHY and w.worker_id not in cordons
        }

    # ------------------------------------------------------------ cordons

    def cordon_worker(self, worker_id: str, mode: Mode, reason: str, *, automatic: bool = False) -> Cordon:
        """Take no new work on the worker (``drain``: and move its tasks after the grace)."""
        with self.db.read() as cur:
            known = {w.worker_id for w in store.list_workers(cur)}
        if worker_id not in known:
            raise NotFound(f"worker {worker_id} is not registered")
        now = self.clock()
        previous = self.cordons.get(worker_id)
        since = previous.since if previous is not None and previous.mode == mode else now
        cordon = Cordon(
            worker_id, mode, reason or ("draining" if mode == "drain" else "cordoned"), since, automatic
        )
        with self.db.transaction() as cur:
            save_cordon(cur, cordon)
        self.cordons = {**self.cordons, worker_id: cordon}
        log.warning(
            "worker %s %s: %s", worker_id, "draining" if mode == "drain" else "cordoned", cordon.reason
        )
        self._fleet_changed()
        return cordon

    def uncordon_worker(self, worker_id: str) -> bool:
        with self.db.transaction() as cur:
            removed = delete_cordon(cur, worker_id)
        self.cordons = {k: v for k, v in self.cordons.items() if k != worker_id}
        self.quarantine.forget(worker_id)
        if removed:
            log.info("worker %s uncordoned", worker_id)
            self._fleet_changed()
        return removed

    def _fleet_changed(self) -> None:
        self._shapes = None
        if self._queue is not None:
            with self._queue_lock:
                self._queue.invalidate()  # parked work may fit (or no longer fit) now
        self.wake()

    def _quarantine(
        self, observations: Mapping[str, AttemptObservation], snap: store.ObservationSnapshot
    ) -> None:
        """Count infrastructure failures per worker; cordon a worker that crossed the threshold."""
        now = self.clock()
        for uid, obs in observations.items():
            attempt = snap.attempts.get(uid)
            if attempt is None or attempt.worker_id is None or attempt.state in TERMINAL_TASK_STATES:
                continue
            kind = infrastructure_failure(obs.state, obs.error)
            if kind is None:
                continue
            reason = self.quarantine.record(attempt.worker_id, kernel.job_of(attempt.task_id), kind, now)
            if reason is not None and attempt.worker_id not in self.cordons:
                try:
                    self.cordon_worker(attempt.worker_id, "cordon", reason, automatic=True)
                except NotFound:
                    pass

    def _drain(self, now: float) -> None:
        """Preempt the tasks still running on workers drained longer than the grace."""
        due = [
            c.worker_id
            for c in self.cordons.values()
            if c.mode == "drain" and now - c.since >= self.drain_grace_s
        ]
        if not due:
            return
        with self.db.read() as cur:
            live = [
                a
                for a in store.unreleased_attempts(cur, due)
                if a.stop_reason is None and a.state not in TERMINAL_TASK_STATES
            ]
            if not live:
                return
            tasks = store.task_snapshots(cur, {a.task_id for a in live})
            attempts = store.attempt_snapshots(cur, [a.attempt_uid for a in live])
        victims = {a.task_id: f"the drain of worker {a.worker_id}" for a in live}
        effects = kernel.preempt(victims, tasks, attempts, now)
        if effects:
            with self.db.transaction() as cur:
                self._commit(cur, effects, now)

    def _queued_snapshot(
        self, queue: PendingQueue, cur: sqlite3.Cursor, now: float, deadlines: bool
    ) -> tuple[store.RoundSnapshot, PassScope | None]:
        """The round's snapshot with only the pending tasks the queue says this pass must see."""
        with self._queue_lock:
            idle = queue.idle(now)
        if idle:  # nothing new, nothing parked: only deadlines to look at
            return store.round_snapshot(cur, now, with_deadlines=deadlines, only=(set(), set())), None
        fleet = store.fleet(cur)
        views, _ = kernel.fleet_views(fleet.workers, fleet.usage, self._healthy(fleet.workers))
        with self._queue_lock:
            scope = queue.scope(views, now)
        only = None if scope.full else (scope.jobs, scope.tasks)
        snap = store.round_snapshot(cur, now, with_deadlines=deadlines, known_fleet=fleet, only=only)
        return snap, scope

    def _passed(self, queue: PendingQueue, scope: PassScope, plan: RoundPlan) -> None:
        """Tell the queue what a committed pass placed and left; keep the pending reasons it found.

        Recorded after the commit: a pass whose commit failed leaves its new work new."""
        with self._queue_lock:
            queue.passed(scope, plan.unplaced or [], plan.placed, plan.now, took_s=self._last_pass_s)
            for job_id in plan.waiting_gangs:  # members wait for their gang to stop: look again
                queue.job_submitted(job_id)
        if scope.full:
            self.last_pending = dict(plan.pending)
        else:
            for task_id in plan.submitted_at:  # every pending task the pass read
                self.last_pending.pop(task_id, None)
            self.last_pending.update(plan.pending)

    @property
    def last_unplaced(self) -> list[TaskRequest]:
        """Every pending task the last passes could not place: the autoscaler's demand."""
        if self._queue is None:
            return []
        with self._queue_lock:
            return self._queue.unplaced()

    def apply_round(self, plan: RoundPlan) -> bool:
        """Commit a round's decisions; any that a newer state overtook are dropped."""
        if not plan.effects:
            if self._queue is not None and plan.scope is not None:
                self._passed(self._queue, plan.scope, plan)
            return False
        with self.db.transaction() as cur:
            applied = self._commit(cur, plan.effects, plan.now, read_at=plan.read_at)
        if self._queue is not None and plan.scope is not None:
            self._passed(self._queue, plan.scope, plan)
        for task_id, (_, number) in applied.attempts.items():
            submitted = plan.submitted_at.get(task_id)
            if number == 0 and submitted is not None:
                self.metrics.dispatch_latency_seconds.observe(max(0.0, plan.now - submitted))
        return plan.effects.urgent

    def _commit(
        self, cur: sqlite3.Cursor, effects: Effects, now: float, *, read_at: int | None = None
    ) -> Applied:
        """``store.commit`` plus what follows in the same transaction: touched jobs roll up, jobs
        that ended take their live sub-jobs (all of them: ``live_descendants`` walks the whole
        tree) with them. ``read_at``: see ``store.commit``. The rest of the controller hears of
        it (``_after_commit``) only once the transaction has committed."""
        applied = store.commit(cur, effects, now, read_at=read_at)
        rollups = store.job_rollups(cur, applied.jobs)
        by_counts, full = kernel.settle_by_counts(rollups, now)
        settled = store.commit(cur, by_counts, now)
        if full:
            settled.merge(store.commit(cur, kernel.settle_jobs(store.job_snapshots(cur, full), now), now))
        applied.merge(settled)
        descendants = [d for job_id in applied.finished_jobs for d in store.live_descendants(cur, job_id)]
        if descendants:
            applied.merge(
                store.commit(cur, kernel.kill_descendants(store.job_snapshots(cur, descendants), now), now)
            )
        self.db.after_commit(lambda: self._after_commit(applied))
        return applied

    def _after_commit(self, applied: Applied) -> None:
        """A commit's side effects on the process (queue, dirty workers, waiters, caches, logs):
        run by ``db.after_commit``, so a transaction that rolls back leaves all of them alone."""
        if self._queue is not None:
            self._tell_queue(self._queue, applied)
        if applied.workers:
            with self._signal_lock:
                self._dirty_workers |= applied.workers
        self.round_stats["dropped_changes"] += len(applied.dropped)
        self.round_stats["refused_changes"] += len(applied.refused)
        if applied.finished_jobs:
            self.job_waiters.ended(applied.finished_jobs)
        if applied.fleet_changed:
            self._shapes = None
        for change in applied.changes:
            for w in change.writes:
                if (
                    isinstance(w, MoveTask)
                    and w.after.state is not w.before.state
                    and not kernel.is_quiet(w.after.state)
                ):
                    uid = w.before.current_attempt_uid
                    log.info(
                        "task %s %s after attempt %s: %s",
                        w.before.task_id,
                        w.after.state.value,
                        uid,
                        w.after.error or w.after.state.value.lower(),
                        extra={
                            "job_id": kernel.job_of(w.before.task_id),
                            "task_id": w.before.task_id,
                            "attempt_uid": uid,
                        },
                    )
                elif isinstance(w, SetJob) and w.state in TERMINAL_JOB_STATES:
                    self._forget_spec(w.job_id)
                    log.info(
                        "job %s %s%s",
                        w.job_id,
                        w.state.value,
                        f": {w.error}" if w.error else "",
                        extra={"job_id": w.job_id},
                    )

    def _tell_queue(self, queue: PendingQueue, applied: Applied) -> None:
        """New work (submissions, tasks back to PENDING, placements a newer state overtook) and
        tasks that left PENDING, for the pending queue."""
        submitted: list[str] = []
        again: list[str] = []
        left: list[str] = []
        for change in applied.changes:
            for w in change.writes:
                if isinstance(w, InsertJob):
                    submitted.append(w.job_id)
                elif isinstance(w, Assign):
                    left.append(w.task_id)
                elif isinstance(w, MoveTask) and (w.before.state is TaskState.PENDING) != (
                    w.after.state is TaskState.PENDING
                ):
                    (again if w.after.state is TaskState.PENDING else left).append(w.before.task_id)
        again += [w.task_id for change in applied.dropped for w in change.writes if isinstance(w, Assign)]
        if not (submitted or again or left):
            return
        with self._queue_lock:
            queue.forget(left)
            for job_id in submitted:
                queue.job_submitted(job_id)
            for task_id in again:
                queue.task_pending_again(task_id)

    def _housekeeping(self, now: float) -> None:
        """Unused bundles, at most once a minute (the store keeps the clock)."""
        self.bundles.maybe_collect(self.db, now)

    # ------------------------------------------------------------ commands

    def submit(self, spec: JobSpec, *, user: str | None = None, admin: bool = True) -> str:
        spec = spec if user is None else spec.model_copy(update={"user": user})
        return self.submit_many([spec], admin=admin)[0]

    def submit_many(self, specs: Sequence[JobSpec], *, admin: bool = True) -> list[str]:
        """Submit jobs in order, each checked as a single submit is (each as its ``spec.user``),
        in one transaction: all of them or, on the first one rejected, none (with its error).
        ``admin``: the caller may submit at PRODUCTION priority without a budget allowing it."""
        now = self.clock()
        names = [self._job_name(spec) for spec in specs]
        workers = self._worker_shapes() if any(self._checks_fit(spec) for spec in specs) else []
        for spec in specs:
            if spec.coscheduling and spec.replicas < 1:
                raise InvalidArgument("a coscheduled job needs at least one replica")
            if self._checks_fit(spec):
                self._check_fits_somewhere(spec, workers)
        for spec, job_name in zip(specs, names, strict=True):
            if spec.secrets:
                missing = self.secrets.missing(job_name.user, [ref.name for ref in spec.secrets])
                if missing:
                    raise InvalidArgument(
                        f"{job_name.user} has no secret named {', '.join(missing)} "
                        f"(set it with: iris secret set {missing[0]})"
                    )
        for bundle_id in {spec.bundle_id for spec in specs if spec.bundle_id is not None}:
            if not self.bundles.exists(bundle_id):
                raise FailedPrecondition(f"bundle {bundle_id} was never uploaded to this controller")
        with self.db.transaction() as cur:
            for spec, job_name in zip(specs, names, strict=True):
                self._insert_job(cur, spec, job_name, now, admin=admin)
        for spec, job_name in zip(specs, names, strict=True):
            log.info("job %s submitted: %d task(s)", job_name, spec.replicas, extra={"job_id": str(job_name)})
        self.wake()
        return [str(job_name) for job_name in names]

    @staticmethod
    def _job_name(spec: JobSpec) -> JobName:
        try:
            if spec.parent_job_id:
                return JobName.parse(spec.parent_job_id).child(spec.name)
            return JobName.root(spec.user or "anonymous", spec.name)
        except ValueError as exc:
            raise InvalidArgument(str(exc)) from None

    def _insert_job(
        self, cur: sqlite3.Cursor, spec: JobSpec, job_name: JobName, now: float, *, admin: bool = True
    ) -> None:
        """Insert one job inside the caller's transaction (a job an earlier one of the same batch
        inserted counts as existing), or raise why it cannot be."""
        job_id = str(job_name)
        root_submitted_at = now
        if spec.parent_job_id:
            parent_row = store.get_job(cur, spec.parent_job_id)
            if parent_row is None:
                raise NotFound(f"parent job {spec.parent_job_id} does not exist")
            if parent_row.state in TERMINAL_JOB_STATES:
                raise FailedPrecondition(
                    f"parent job {spec.parent_job_id} has terminated ({parent_row.state})"
                )
            root_submitted_at = parent_row.root_submitted_at
            # not cached here: the parent may be an earlier job of this batch, gone if it rolls back
            parent_spec = self._spec_cache.get(spec.parent_job_id) or JobSpec.model_validate_json(
                parent_row.spec_json
            )
            spec = inherit_from_parent(spec, parent_spec)
            # a sub-job of a PRODUCTION job was admitted at PRODUCTION with its parent
            admin = admin or parent_row.priority is PriorityBand.PRODUCTION
        self._admit(spec, job_name, admin=admin)
        existing = store.get_job(cur, job_id)
        replaces = None
        if existing is not None:
            if spec.existing_job_policy == "keep":
                return
            state = existing.state.value.lower()
            if existing.state not in TERMINAL_JOB_STATES:
                raise AlreadyExists(f"job {job_id} is still {state}: stop it first, or choose another name")
            if spec.existing_job_policy != "replace":
                raise AlreadyExists(
                    f"job {job_id} already exists ({state}); submit with --replace (replace=True) to replace it"
                )
            if store.jobs_with_live_attempts(cur, store.job_tree(cur, job_id)):
                raise AlreadyExists(f"job {job_id} is still stopping its tasks: try again in a moment")
            replaces = job_id
            self.db.after_commit(lambda: self._forget_spec(job_id))
        insert = InsertJob(
            job_id=job_id,
            spec=spec,
            user=job_name.user,
            parent_job_id=spec.parent_job_id,
            root_job_id="/" + job_name.namespace,
            depth=job_name.depth,
            root_submitted_at=root_submitted_at,
            replaces=replaces,
        )
        event = Event(EventKind.JOB_SUBMITTED, f"submitted {spec.replicas} task(s)", job_id)
        self._commit(cur, Effects(changes=(Change((insert,), (event,)),)), now)

    def _admit(self, spec: JobSpec, job_name: JobName, *, admin: bool) -> None:
        """Refuse a job its user's budget can never admit (band, or too large); gates.py."""
        count = spec.replicas if spec.coscheduling else 1
        refusal = admission_refusal(
            job_name.user,
            spec.priority,
            Resources.from_spec(spec.resources),
            count,
            self.budgets.for_user(job_name.user),
            admin=admin,
        )
        if refusal is not None:
            raise PermissionDenied(refusal)

    def set_budget(self, user: str, budget: UserBudget) -> UserBudgetInfo:
        info = self.budgets.set(user, budget, self.clock())
        self._budgets_changed()
        return info

    def remove_budget(self, user: str) -> bool:
        removed = self.budgets.remove(user)
        self._budgets_changed()
        return removed

    def _budgets_changed(self) -> None:
        """Work a budget held may fit now: the next pass looks at every pending task."""
        if self._queue is not None:
            with self._queue_lock:
                self._queue.invalidate()
        self.wake()

    def _checks_fit(self, spec: JobSpec) -> bool:
        return self._descriptor.kind is BackendKind.WORKER and not spec.wait_for_capacity

    def _worker_shapes(self) -> list[tuple[str, ResourceSpec, dict[str, str]]]:
        """Every registered worker's capacity and attributes (what a submit is checked against),
        read once and kept until a worker registers or is reaped."""
        shapes = self._shapes
        if shapes is None:
            with self.db.read() as cur:
                shapes = [(w.worker_id, w.capacity, w.attributes) for w in store.list_workers(cur)]
            self._shapes = shapes
        return shapes

    def _check_fits_somewhere(
        self, spec: JobSpec, workers: list[tuple[str, ResourceSpec, dict[str, str]]]
    ) -> None:
        """Reject at submit a job that no registered worker and no scale group could ever host
        (unless it asks to wait for capacity); see capacity.py."""
        gang = spec.replicas if spec.coscheduling else 1
        group_by = spec.coscheduling.group_by if spec.coscheduling else None
        worker_reason = workers_misfit(
            workers, spec.resources, spec.constraints, replicas=gang, group_by=group_by
        )
        if self.autoscaler is None:
            if worker_reason:
                raise InvalidArgument(
                    f"no worker can ever run this job: {worker_reason}"
                    " (submit with --wait-for-capacity to queue it for workers yet to join)"
                )
            return
        group_reason = self.autoscaler.unfittable_reason(spec.resources, spec.constraints, gang, group_by)
        if group_reason and (not workers or worker_reason):
            also = f"; and {worker_reason}" if worker_reason else ""
            raise InvalidArgument(
                f"no scale group can ever run this job: {group_reason}{also}"
                " (submit with --wait-for-capacity to queue it anyway)"
            )

    def stop_job(self, job_id: str) -> JobState:
        now = self.clock()
        with self.db.transaction() as cur:
            job = store.get_job(cur, job_id)
            if job is None:
                raise NotFound(f"job {job_id} does not exist")
            if job.state in TERMINAL_JOB_STATES:
                return job.state
            (snap,) = store.job_snapshots(cur, [job_id])
            change = kernel.terminate_job(
                snap, JobState.KILLED, "stopped by request", StopReason.CANCELLED, now
            )
            self._commit(cur, Effects(changes=(change,), urgent=True), now)
        self.wake()
        return JobState.KILLED

    def register_worker(self, req: RegisterRequest) -> RegisterResponse:
        if self._descriptor.kind is not BackendKind.WORKER:
            raise FailedPrecondition("this controller runs the kubernetes backend: it has no worker store")
        now = self.clock()
        worker_id = req.worker_id or f"worker-{secrets.token_hex(4)}"
        with self.db.transaction() as cur:
            stale = [w for w in store.worker_ids_at_address(cur, req.address) if w != worker_id]
            event = Event(EventKind.WORKER_REGISTERED, f"registered at {req.address}", worker_id=worker_id)
            effects = Effects(changes=(Change((UpsertWorker(worker_id, req),), (event,)),))
            why = f"worker {worker_id} now answers at {req.address}"
            for old in stale:
                effects += kernel.reap_worker(store.worker_snapshot(cur, old), old, why, now)
            self._commit(cur, effects, now)
        for old in stale:
            self.health.forget(old)
        self.health.register(worker_id, now)
        with self._signal_lock:
            self._dirty_workers.add(worker_id)
        self.wake()
        return RegisterResponse(
            worker_id=worker_id,
            reconcile_interval_s=self.tick_interval_s,
            rpc_secret=worker_secret(self.worker_rpc_key, req.address).hex(),
            fence_after_s=fence_after(self.health.grace_s),
        )

    def reap_worker(self, worker_id: str, why: str, *, tell_autoscaler: bool = True) -> None:
        """The worker is gone: its attempts are lost (their tasks retry elsewhere)."""
        now = self.clock()
        with self.db.transaction() as cur:
            snap = store.worker_snapshot(cur, worker_id)
            self._commit(cur, kernel.reap_worker(snap, worker_id, why, now), now)
        log.warning("reaped worker %s: %s", worker_id, why, extra={"worker_id": worker_id})
        self.health.forget(worker_id)
        if tell_autoscaler and self.autoscaler is not None:
            self.autoscaler.reap_worker(worker_id)
        self.wake()

    def register_endpoint(self, reg: EndpointRegistration) -> EndpointInfo:
        """A live job's task publishes ``name`` in its job tree's namespace (replacing an older one)."""
        now = self.clock()
        try:
            namespace = JobName.parse(reg.job_id).namespace
        except ValueError as exc:
            raise InvalidArgument(str(exc)) from None
        with self.db.transaction() as cur:
            job = store.get_job(cur, reg.job_id)
            if job is None:
                raise NotFound(f"job {reg.job_id} does not exist")
            if job.state in TERMINAL_JOB_STATES:
                raise FailedPrecondition(f"job {reg.job_id} has finished; its endpoints are gone")
            store.upsert_endpoint(
                cur,
                namespace=namespace,
                name=reg.name,
                address=reg.address,
                job_id=reg.job_id,
                task_id=reg.task_id,
                metadata=reg.metadata,
                now=now,
            )
        return EndpointInfo(
            name=reg.name,
            namespace=namespace,
            address=reg.address,
            job_id=reg.job_id,
            task_id=reg.task_id,
            metadata=reg.metadata,
            registered_at=now,
        )

    def nudge(self, worker_id: str) -> bool:
        """A worker says one of its attempts changed: reconcile it now. False if unknown."""
        if not self.health.known(worker_id):
            return False
        with self._signal_lock:
            self._nudged.add(worker_id)
        self.wake()
        return True

    def attempt_ref(self, task_id: str, attempt_uid: str | None = None) -> AttemptRef:
        """The task's current (or given) attempt and where its RPCs go; raises NotFound."""
        with self.db.read() as cur:
            task = store.get_task(cur, task_id)
            if task is None:
                raise NotFound(f"task {task_id} does not exist")
            uid = attempt_uid or task.current_attempt_uid
            if uid is None:
                raise FailedPrecondition(f"task {task_id} has not started yet")
            attempt = store.get_attempt(cur, uid)
        if attempt is None or attempt.task_id != task_id:
            raise NotFound(f"attempt {uid} of task {task_id} does not exist")
        if self._descriptor.kind is BackendKind.KUBERNETES:
            return AttemptRef(TaskTarget(attempt_uid=uid), uid, task_id)
        if not attempt.worker_address:
            raise FailedPrecondition(f"the worker that ran task {task_id} is gone")
        return AttemptRef(TaskTarget(address=attempt.worker_address), uid, task_id)

    def require_backend(self) -> TaskBackend:
        if self.backend is None:
            raise NotImplementedForBackend("this controller has no backend connected")
        return self.backend

    # ------------------------------------------------------------ WORKER seams

    def dry_run(self, spec: JobSpec, *, user: str | None = None) -> dict[str, Any]:
        """Would this job place now, and where? Runs the real kernel on a snapshot; writes nothing."""
        if self._descriptor.kind is not BackendKind.WORKER:
            raise FailedPrecondition(
                "dry runs need the Iris scheduler; on kubernetes, Kueue decides placement"
            )
        try:
            name = JobName.root(user or spec.user or "anonymous", spec.name)
        except ValueError as exc:
            raise InvalidArgument(str(exc)) from None
        now = self.clock()
        with self.db.read() as cur:
            snap = store.round_snapshot(cur, now, with_deadlines=False)
            workers = snap.workers or store.list_workers(cur)
            usage = snap.usage or store.worker_usage(cur)
        if not workers and self.autoscaler is not None:
            would, summary = dry_run_from_groups(spec, self.autoscaler.groups)
            return {"job_id": str(name), "would_place": would, "summary": summary}
        views, running = kernel.fleet_views(workers, usage, self._healthy(workers))
        specs = self._specs_for({p.job_id: p.spec_json for p in snap.pending}, [])
        queued, _ = kernel.task_requests(snap.pending, specs, snap.stopping_gangs)
        res = ResourceSpec.model_validate(spec.resources.model_dump())
        tasks = [
            TaskRequest(
                task_id=str(name.task(i)),
                job_id=str(name),
                user=name.user,
                resources=Resources.from_spec(res),
                constraints=tuple(spec.constraints),
                preferences=tuple(spec.preferences),
                band=spec.priority,
                depth=name.depth,
                root_submitted_at=now,
                submitted_at=now,
                group_by=spec.coscheduling.group_by if spec.coscheduling else None,
                gang_size=spec.replicas if spec.coscheduling else 1,
            )
            for i in range(spec.replicas)
        ]
        result = explain(tasks, views, running, queued=queued)
        return {
            "job_id": str(name),
            "would_place": result.would_place,
            "summary": result.summary(),
            "placements": [{"task_id": t, "worker_id": w} for t, w in result.placements],
            "pending": {t: {"code": str(r.code), "message": r.message} for t, r in result.pending.items()},
            "preemptions": [
                {"victim_task_id": p.victim_task_id, "worker_id": p.worker_id} for p in result.preemptions
            ],
        }

    def _reconcile_workers(self, targets: set[str] | None) -> bool:
        if (targets is not None and not targets) or self.backend is None:
            return False
        with self.db.read() as cur:
            workers = {w.worker_id: w for w in store.list_workers(cur)}
            ids = list(workers) if targets is None else [w for w in targets if w in workers]
            live = store.unreleased_attempts(cur, ids)
        by_worker: dict[str, list[store.LiveAttempt]] = {w: [] for w in ids}
        for a in live:
            by_worker.setdefault(a.worker_id or "", []).append(a)
        groups = {
            wid: DesiredGroup(
                tuple(self._desired(by_worker.get(wid, []))),
                wid,
                workers[wid].address,
                renew_lease=self.health.consecutive_failures(wid) == 0,
            )
            for wid in ids
        }
        reports = self.backend.converge(list(groups.values()))
        now = self.clock()
        observations: dict[str, AttemptObservation] = {}
        contacts = []
        for report in reports:
            if report.worker_id is None or report.worker_id not in groups:
                continue
            renewed = groups[report.worker_id].renew_lease
            if report.observations is None or report.health is None:
                self.health.apply(
                    report.worker_id,
                    HealthEvent.UNREACHABLE,
                    now,
                    may_have_arrived=renewed and (report.may_have_arrived or report.observations is not None),
                )
                continue
            health = report.health
            self.health.apply(
                report.worker_id,
                HealthEvent.REACHED if health.healthy else HealthEvent.UNREACHABLE,
                now,
                may_have_arrived=renewed,
            )
            # A full disk is not a dead worker: it keeps its tasks and the scheduler skips it.
            self.health.set_disk_pressure(report.worker_id, health.disk_pressure)
            contacts.append((now, health.model_dump_json(), report.worker_id))
            observations.update(_asked(groups[report.worker_id], report))
        changed = self.fold(observations, now)
        if contacts and (targets is None or changed):
            with self.db.transaction() as cur:
                store.touch_workers(cur, contacts)
        return changed

    def _update_worker_health(self) -> None:
        """Reap workers past their grace: their attempts become WORKER_FAILED and retry elsewhere."""
        for worker_id in self.health.over_threshold(self.clock()):
            self.reap_worker(worker_id, "stopped answering reconciles")

    def _trigger_autoscale(self) -> None:
        if self.autoscaler is None:
            return
        now = self.clock()
        if now < self._next_autoscale:
            return
        self._next_autoscale = now + self.autoscale_interval_s
        with self.db.read() as cur:
            workers = store.list_workers(cur)
            usage = store.worker_usage(cur)
        busy_workers = {u.worker_id for u in usage if u.state in ACTIVE_TASK_STATES}
        plan = self.autoscaler.tick(
            demand_from_requests(self.last_unplaced, self.last_pending),
            slice_usage_from_workers(workers, busy_workers),
        )
        for worker_id in [w for t in plan.terminates for w in t.worker_ids]:
            # Terminated slices take their workers with them: drop them now, not after a grace period.
            self.reap_worker(worker_id, "its slice was scaled down", tell_autoscaler=False)

    def _desired(self, live: Sequence[store.LiveAttempt]) -> list[DesiredAttempt]:
        new_uids = [a.attempt_uid for a in live if a.state is TaskState.ASSIGNED and a.stop_reason is None]
        gangs: dict[str, tuple[int, int]] = {}
        leaders: dict[tuple[str, int], str] = {}
        if new_uids:
            with self.db.read() as cur:
                gangs = store.gang_of_attempts(cur, new_uids)
                if gangs:
                    by_uid = {a.attempt_uid: a.job_id for a in live}
                    leaders = store.gang_leader_addresses(
                        cur, [(by_uid[uid], generation) for uid, (generation, _) in gangs.items()]
                    )
        desired = []
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
                spec = self._run_spec(a)
                if a.attempt_uid in gangs:
                    generation, size = gangs[a.attempt_uid]
                    update: dict[str, Any] = {"gang_generation": generation, "gang_size": size}
                    leader = leaders.get((a.job_id, generation))
                    if leader is not None:
                        update["gang_coordinator"] = gang_coordinator(leader, a.job_id, generation)
                    spec = spec.model_copy(update=update)
                desired.append(DesiredAttempt(attempt_uid=a.attempt_uid, intent="run", spec=spec))
            else:
                desired.append(DesiredAttempt(attempt_uid=a.attempt_uid, intent="run"))
        return desired

    # ------------------------------------------------------------ KUBERNETES seams

    def _reconcile_pods(self) -> bool:
        if self.backend is None:
            return False
        with self.db.read() as cur:
            live = store.unreleased_attempts(cur)
        group = DesiredGroup(tuple(self._desired(live)))
        observations: dict[str, AttemptObservation] = {}
        for report in self.backend.converge([group]):
            if report.observations is None:
                log.warning("pod reconcile skipped this round: %s", report.error)
                return False
            observations.update(_asked(group, report))
        return self.fold(observations, self.clock())

    # ------------------------------------------------------------ observations

    def fold(self, observations: Mapping[str, AttemptObservation], now: float) -> bool:
        """Fold a reconcile's observations into the store (snapshot, pure fold, guarded commit)."""
        if not observations:
            return False
        with self.db.read() as cur:
            read_at = store.writes_so_far(cur)
            snap = store.observation_snapshot(cur, observations)
        if self.quarantine.threshold > 0 and self._descriptor.kind is BackendKind.WORKER:
            self._quarantine(observations, snap)
        effects = kernel.fold_observations(snap, observations.values(), now)
        if not effects:
            return False
        with self.db.transaction() as cur:
            applied = self._commit(cur, effects, now, read_at=read_at)
            first_runs = {
                w.before.task_id: w.after.started_at
                for c in applied.changes
                for w in c.writes
                if isinstance(w, MoveTask) and w.before.started_at is None and w.after.started_at is not None
            }
            submitted = store.submitted_at(cur, {kernel.job_of(t) for t in first_runs}) if first_runs else {}
        for task_id, started_at in first_runs.items():
            at = submitted.get(kernel.job_of(task_id))
            if at is not None and started_at is not None:
                self.metrics.task_start_latency_seconds.observe(max(0.0, started_at - at))
        return effects.urgent

    # ------------------------------------------------------------ specs

    def _job_spec(self, job_id: str, spec_json: str | None = None) -> JobSpec:
        spec = self._spec_cache.get(job_id)
        if spec is None:
            if spec_json is None:
                with self.db.read() as cur:
                    row = store.get_job(cur, job_id)
                if row is None:
                    raise NotFound(f"job {job_id} does not exist")
                spec_json = row.spec_json
            spec = JobSpec.model_validate_json(spec_json)
            self._spec_cache[job_id] = spec
            if len(self._spec_cache) > SPEC_CACHE_SIZE:
                self._spec_cache.popitem(last=False)
        return spec

    def secret_masks(self, job_id: str) -> list[str]:
        """The values of the job's secrets (to mask in logs the controller collects itself)."""
        spec = self._job_spec(job_id)
        if not spec.secrets:
            return []
        return list(
            self.secrets.values(JobName.parse(job_id).user, [ref.name for ref in spec.secrets]).values()
        )

    def _forget_spec(self, job_id: str) -> None:
        self._spec_cache.pop(job_id, None)
        self._run_templates.pop(job_id, None)

    def _specs_for(self, spec_json: Mapping[str, str], job_ids: Iterable[str]) -> dict[str, JobSpec]:
        specs = {job_id: self._job_spec(job_id, text) for job_id, text in spec_json.items()}
        for job_id in job_ids:
            if job_id not in specs:
                specs[job_id] = self._job_spec(job_id)
        return specs

    def _run_spec(self, a: store.LiveAttempt) -> RunSpec:
        """The attempt's spec: its job's template (validated once) with the attempt's own fields."""
        now = self.clock()
        cached = self._run_templates.get(a.job_id)
        if cached is None or now - cached[1] > RUN_TEMPLATE_MAX_AGE_S:
            cached = self._run_templates[a.job_id] = (self._run_template(a.job_id), now)
            while len(self._run_templates) > SPEC_CACHE_SIZE:
                self._run_templates.pop(next(iter(self._run_templates)))
        return cached[0].model_copy(
            update={
                "attempt_uid": a.attempt_uid,
                "attempt_number": a.attempt_number,
                "task_id": a.task_id,
                "task_index": a.task_index,
            }
        )

    def _run_template(self, job_id: str) -> RunSpec:
        spec = self._job_spec(job_id)
        user = JobName.parse(job_id).user
        env = {**self.task_env, **spec.env}
        secret_env: dict[str, str] = {}
        if spec.secrets:
            values = self.secrets.values(user, [ref.name for ref in spec.secrets])
            secret_env = {ref.env_name: values[ref.name] for ref in spec.secrets if ref.name in values}
        if self.auth.enabled:
            # The task acts as its job's user: sub-jobs, endpoints and its bundle need no other secret.
            # The token names this run of the job: a --replace'd or finished run's token is refused.
            with self.db.read() as cur:
                row = store.get_job(cur, job_id)
            if row is None:
                raise NotFound(f"job {job_id} does not exist")
            env["IRIS_TOKEN"] = self.auth.job_token(job_id, user, row.run_uid)
        return RunSpec(
            attempt_uid="",
            attempt_number=0,
            job_id=job_id,
            task_id="",
            task_index=0,
            entrypoint=spec.entrypoint,
            resources=spec.resources,
            env=env,
            environment=spec.environment,
            timeout_s=None,  # the controller enforces execution timeouts itself (no retry)
            ports=spec.ports,
            bundle_id=spec.bundle_id,
            priority=spec.priority,
            constraints=spec.constraints,
            preferences=spec.preferences,
            replicas=spec.replicas,
            coscheduling=spec.coscheduling,
            user=user,
            image=spec.image or self.default_task_image,
            image_pull_policy=spec.image_pull_policy,
            secret_env=secret_env,
        )


def _asked(group: DesiredGroup, report: GroupReport) -> dict[str, AttemptObservation]:
    """Never trust reports about attempts the group did not ask about."""
    asked = {d.attempt_uid for d in group.attempts}
    return {o.attempt_uid: o for o in report.observations or () if o.attempt_uid in asked}


def gang_coordinator(leader_address: str, job_id: str, generation: int) -> str:
    """``host:port`` of a gang's coordinator: task 0's worker host, a port derived from the gang."""
    address = leader_address.split("://", 1)[-1].split("/", 1)[0]
    host = address.rpartition(":")[0] or address
    return f"{host}:{gang_port(job_id, generation)}"


def inherit_from_parent(child: JobSpec, parent: JobSpec) -> JobSpec:
    """A sub-job runs in its parent's world: workspace bundle, environment variables and pip
    environment and image carry over unless the child names its own (its own env vars win key by key)."""
    update: dict[str, Any] = {}
    if child.bundle_id is None and parent.bundle_id is not None:
        update["bundle_id"] = parent.bundle_id
    if parent.env:
        update["env"] = {**parent.env, **child.env}
    if child.environment is None and parent.environment is not None:
        update["environment"] = parent.environment
    if child.image is None and parent.image is not None:
        update["image"] = parent.image
        update["image_pull_policy"] = parent.image_pull_policy
    if not child.secrets and parent.secrets:
        update["secrets"] = parent.secrets
    return child.model_copy(update=update) if update else child


def open_db(state_dir: str | Path | None) -> ControllerDB:
    """The controller's database in ``state_dir`` (in memory without one)."""
    return ControllerDB(Path(state_dir) / "controller.sqlite3" if state_dir is not None else ":memory:")


def create_controller(
    descriptor: BackendDescriptor,
    *,
    state_dir: str | Path | None = None,
    db: ControllerDB | None = None,
    autoscaler: Autoscaler | None = None,
    backend: TaskBackend | None = None,
    controller_url: str = "",
    **options: Any,
) -> Controller:
    """Build an in-process controller without starting any thread or server (a WORKER one
    talks to worker daemons over HTTP unless given another ``backend``). Every dependency is
    passed here; nothing is wired in afterwards."""
    db = db or open_db(state_dir)
    key = options.pop("worker_rpc_key", None)
    if key is None:
        key = (
            load_or_create_key(Path(state_dir) / "worker-rpc.key")
            if state_dir is not None
            else new_master_key()
        )
    if backend is None and descriptor.kind is BackendKind.WORKER:
        backend = WorkerDaemonBackend(WorkerRpcClient(master_key=key))
    return Controller(
        descriptor,
        db,
        bundle_dir=Path(state_dir) / "bundles" if state_dir is not None else None,
        log_dir=Path(state_dir) / "logs" if state_dir is not None else None,
        secrets=SecretStore(
            db, load_or_create_secret_key(Path(state_dir) / KEY_FILE) if state_dir is not None else None
        ),
        controller_url=controller_url,
        autoscaler=autoscaler,
        backend=backend,
        worker_rpc_key=key,
        **options,
    )
