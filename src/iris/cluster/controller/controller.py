"""The controller: one control loop plus thin commands, over pure kernels and a guarded store.

A round (``run_round``) is snapshot -> pure decisions -> typed effects -> guarded commit, twice:
``plan_round`` reads one frozen ``store.round_snapshot`` and asks ``round_kernel.plan_round`` where
pending work goes (and what times out); ``apply_round`` commits those effects. Then the backend's
seam reconciles the desired attempts, and what it observed is folded by
``round_kernel.fold_observations`` and committed the same way. ``store.commit`` checks every write
against the version or state it was decided from, so a command that lands between a round's
snapshot and its commit (a stop, a worker reaped) wins, and the round's stale decision is dropped
and re-decided next round. Touched jobs roll up (``round_kernel.settle_*``) inside the commit's
transaction; the rest of the process hears of a commit only after it committed (``db.after_commit``).

The shell is split by responsibility: this module (the loop, the round, the commit),
``commands.py`` (submit, stop, endpoints, budgets), ``worker_seam.py`` (WORKER: reconcile worker
daemons, health, register/reap, cordons, autoscaler, dry runs), ``pod_seam.py`` (KUBERNETES: Pods)
and ``spec_cache.py`` (parsed specs and run templates). The backend kind is looked at once, here in
``__init__``, where it picks the seam (``workers`` or ``pods``) and the pending queue.
"""

from __future__ import annotations

import logging
import sqlite3
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from iris.cluster.backends.worker_daemon import WorkerDaemonBackend, WorkerRpcClient
from iris.cluster.controller import round_kernel as kernel
from iris.cluster.controller import store
from iris.cluster.controller.auth import Authenticator
from iris.cluster.controller.autoscaler import Autoscaler
from iris.cluster.controller.backend import AttemptRef, BackendDescriptor, BackendKind, TaskBackend
from iris.cluster.controller.budgets import Budgets
from iris.cluster.controller.bundles import BundleStore
from iris.cluster.controller.commands import Commands
from iris.cluster.controller.commit_news import CommitNews, log_moves
from iris.cluster.controller.cordons import Cordon, Mode, QuarantineWindow, load_cordons
from iris.cluster.controller.db import ControllerDB
from iris.cluster.controller.effects import Applied, Effects, MoveTask
from iris.cluster.controller.job_waiters import JobWaiters
from iris.cluster.controller.logstore import LogStore
from iris.cluster.controller.logstore.pod_collector import PodLogCollector
from iris.cluster.controller.loop import ControlLoop
from iris.cluster.controller.metrics import ControllerMetrics
from iris.cluster.controller.pod_seam import PodSeam
from iris.cluster.controller.reconcile_kernel import desired_attempts, new_attempts
from iris.cluster.controller.round_kernel import RoundPlan
from iris.cluster.controller.scheduler import PendingReason, TaskRequest
from iris.cluster.controller.scheduler.fairshare import UsageLedger
from iris.cluster.controller.scheduler.queue import PendingQueue
from iris.cluster.controller.secrets import KEY_FILE, SecretStore, load_or_create_secret_key
from iris.cluster.controller.spec_cache import SpecCache
from iris.cluster.controller.submission import inherit_from_parent
from iris.cluster.controller.timeseries import TimeSeries
from iris.cluster.controller.worker_health import WorkerHealthTracker
from iris.cluster.controller.worker_seam import WorkerSeam
from iris.rpc.enums import JobState
from iris.rpc.errors import FailedPrecondition, NotImplementedForBackend
from iris.rpc.models import (
    AttemptObservation,
    DesiredAttempt,
    EndpointInfo,
    EndpointRegistration,
    JobSpec,
    RegisterRequest,
    RegisterResponse,
    UserBudget,
    UserBudgetInfo,
)
from iris.rpc.signing import load_or_create_key, new_master_key

__all__ = ["Controller", "create_controller", "inherit_from_parent", "open_db"]

log = logging.getLogger("iris.controller")


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
        # Each worker gets its secret derived from this key at registration; the WORKER backend
        # signs every call with it (see create_controller).
        self.worker_rpc_key = worker_rpc_key or new_master_key()
        self.db = db
        self.bundles = BundleStore(bundle_dir)
        # Task logs and usage, kept after their workers are gone (written by the API, not this loop).
        self.logs = LogStore(log_dir)
        # Per-user secrets (encrypted at rest), and what the cluster config adds to every job.
        self.secrets = secrets or SecretStore(db)
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
        # Parsed job specs and run templates; ``specs.task_env`` is defaults.task_env (under each
        # job's own env), ``specs.default_task_image`` the image of every job that names none.
        self.specs = SpecCache(db, self.secrets, self.auth, clock)
        self.specs.default_task_image = default_task_image
        # Per-user budgets (the scheduler's first gate) and recent usage (fair share among users).
        self.budgets = Budgets(db)
        self.usage = UsageLedger()
        self.timeseries = TimeSeries()
        # API requests waiting for jobs to end, woken by the commit that ends each.
        self.job_waiters = JobWaiters()
        # What the open transaction's commits wrote, told once it commits (``commit``); a news
        # left by a transaction that rolled back is recognised by its transaction number.
        self._news: CommitNews | None = None
        self._news_tx = -1
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
        self.commands = Commands(self)
        # The backend kind picks the seams, here and nowhere else. WORKER: the Iris scheduler with
        # its pending queue (a round's work grows with what changed, not with the queue), worker
        # reconcile and health. KUBERNETES: Pod reconciliation (Kueue places).
        worker_kind = descriptor.kind is BackendKind.WORKER
        self.loop = ControlLoop(self, PendingQueue() if worker_kind else None)
        self.workers = WorkerSeam(self) if worker_kind else None
        self.pods = PodSeam(self) if descriptor.kind is BackendKind.KUBERNETES else None
        if self.workers is not None:
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
        return self.workers is not None and self.autoscaler is not None

    @property
    def task_env(self) -> dict[str, str]:
        return self.specs.task_env

    @task_env.setter
    def task_env(self, env: dict[str, str]) -> None:
        self.specs.task_env = env

    # ------------------------------------------------------------ lifecycle

    def set_url(self, url: str) -> None:
        """The address tasks use to reach this controller (known once the API socket is bound)."""
        self.controller_url = url
        if self.backend is not None:
            self.backend.set_controller_url(url)
        if self.autoscaler is not None:
            self.autoscaler.controller_url = url

    def start(self) -> None:
        if self.backend is not None:
            self.backend.watch(self.wake)  # substrate events wake the loop; the tick stays the safety net
        self.loop.start()
        self.logs.start()
        if self.pods is not None and self.backend is not None:
            self._pod_logs = PodLogCollector(self, self.logs).start()

    def stop(self) -> None:
        self.loop.stop()
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
        self.loop.wake()

    def mark_dirty(self, worker_ids: Iterable[str]) -> None:
        """Reconcile these workers in the next round (their desired sets changed)."""
        self.loop.mark_dirty(worker_ids)

    # ------------------------------------------------------------ the round (loop.py)

    def run_round(self, *, full: bool = True, nudged: Iterable[str] = ()) -> bool:
        return self.loop.run_round(full=full, nudged=nudged)

    def plan_round(self, now: float | None = None) -> RoundPlan:
        return self.loop.plan_round(now)

    def apply_round(self, plan: RoundPlan) -> bool:
        return self.loop.apply_round(plan)

    @property
    def last_pending(self) -> dict[str, PendingReason]:
        """Why each pending task the last passes read did not place."""
        return self.loop.last_pending

    @property
    def last_unplaced(self) -> list[TaskRequest]:
        """Every pending task the last passes could not place: the autoscaler's demand."""
        return self.loop.unplaced()

    def invalidate_queue(self) -> None:
        self.loop.invalidate_queue()

    def fleet_changed(self) -> None:
        self.commands.forget_shapes()
        self.loop.invalidate_queue()

    # ------------------------------------------------------------ the commit

    def commit(
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
        news = self._news
        if news is None or self._news_tx != self.db.transactions:
            # the transaction's first commit: what all of its commits wrote is told once, at COMMIT
            news = self._news = CommitNews()
            self._news_tx = self.db.transactions
            self.db.after_commit(self._after_commit)
        news.add(applied)
        return applied

    def _after_commit(self) -> None:
        """A transaction's side effects on the process (queue, dirty workers, waiters, caches,
        logs): run by ``db.after_commit``, so a transaction that rolls back leaves all of them alone."""
        news, self._news = self._news, None
        if news is None:
            return
        self.loop.committed(news)
        self.round_stats["dropped_changes"] += news.dropped
        self.round_stats["refused_changes"] += news.refused
        if news.finished_jobs:
            self.job_waiters.ended(news.finished_jobs)
            for job_id in news.finished_jobs:
                self.specs.forget(job_id)
        if news.fleet_changed:
            self.commands.forget_shapes()
        log_moves(news.moves)

    # ------------------------------------------------------------ observations, desired sets

    def fold(self, observations: Mapping[str, AttemptObservation], now: float) -> bool:
        """Fold a reconcile's observations into the store (snapshot, pure fold, guarded commit)."""
        if not observations:
            return False
        with self.db.read() as cur:
            read_at = store.writes_so_far(cur)
            snap = store.observation_snapshot(cur, observations)
        if self.quarantine.threshold > 0 and self.workers is not None:
            self.workers.quarantine(observations, snap)
        effects = kernel.fold_observations(snap, observations.values(), now)
        if not effects:
            return False
        with self.db.transaction() as cur:
            applied = self.commit(cur, effects, now, read_at=read_at)
            first_runs = {
                w.before.task_id: w.after.started_at
                for c in applied.changes
                for w in c.writes
                if isinstance(w, MoveTask) and w.before.started_at is None and w.after.started_at is not None
            }
            submitted = store.submitted_at(cur, {kernel.job_of(t) for t in first_runs}) if first_runs else {}
        for task_id, started_at in first_runs.items():
            at = submitted.get(kernel.job_of(task_id))
            if at is not None:
                self.metrics.task_start_latency_seconds.observe(max(0.0, started_at - at))
        return effects.urgent

    def desired(self, live: Sequence[store.LiveAttempt]) -> list[DesiredAttempt]:
        """The desired set of these live attempts (reconcile_kernel.desired_attempts), with the
        gang facts of the new ones read from the store."""
        gangs: dict[str, tuple[int, int]] = {}
        leaders: dict[tuple[str, int], tuple[str, int]] = {}
        new_uids = new_attempts(live)
        if new_uids:
            with self.db.read() as cur:
                gangs = store.gang_of_attempts(cur, new_uids)
                if gangs:
                    by_uid = {a.attempt_uid: a.job_id for a in live}
                    leaders = store.gang_leader_addresses(
                        cur, [(by_uid[uid], generation) for uid, (generation, _) in gangs.items()]
                    )
        return desired_attempts(live, self.specs.run_spec, gangs, leaders)

    # ------------------------------------------------------------ the specification's seam names
    # The specification's guarded blocks (``if descriptor.kind is BackendKind.WORKER:
    # self._update_worker_health(); self._trigger_autoscale()`` / ``... KUBERNETES:
    # self._reconcile_pods()``) call these; the loop calls the same seam methods.

    def _update_worker_health(self) -> None:
        """WORKER: reap workers past their grace (their attempts retry elsewhere)."""
        self.require_workers("worker health needs worker daemons").reap_unhealthy()

    def _trigger_autoscale(self) -> None:
        """WORKER: one autoscaler tick when it is due (nothing without an autoscaler)."""
        self.require_workers("autoscaling needs worker daemons").autoscale()

    def _reconcile_pods(self) -> bool:
        """KUBERNETES: converge the Pods on the desired attempts and fold what they show."""
        if self.pods is None:
            raise FailedPrecondition("pod reconciliation needs the KUBERNETES backend")
        return self.pods.reconcile()

    # ------------------------------------------------------------ commands (commands.py, worker_seam.py)

    def submit(self, spec: JobSpec, *, user: str | None = None, admin: bool = True) -> str:
        spec = spec if user is None else spec.model_copy(update={"user": user})
        return self.commands.submit_many([spec], admin=admin)[0]

    def submit_many(self, specs: Sequence[JobSpec], *, admin: bool = True) -> list[str]:
        return self.commands.submit_many(specs, admin=admin)

    def stop_job(self, job_id: str) -> JobState:
        return self.commands.stop_job(job_id)

    def register_endpoint(self, reg: EndpointRegistration) -> EndpointInfo:
        return self.commands.register_endpoint(reg)

    def attempt_ref(self, task_id: str, attempt_uid: str | None = None) -> AttemptRef:
        return self.commands.attempt_ref(task_id, attempt_uid)

    def set_budget(self, user: str, budget: UserBudget) -> UserBudgetInfo:
        return self.commands.set_budget(user, budget)

    def remove_budget(self, user: str) -> bool:
        return self.commands.remove_budget(user)

    def secret_masks(self, job_id: str) -> list[str]:
        return self.specs.secret_masks(job_id)

    def require_backend(self) -> TaskBackend:
        if self.backend is None:
            raise NotImplementedForBackend("this controller has no backend connected")
        return self.backend

    def require_workers(self, why: str) -> WorkerSeam:
        """The WORKER seam, or ``why`` it is missing (a KUBERNETES controller has none)."""
        if self.workers is None:
            raise FailedPrecondition(why)
        return self.workers

    def register_worker(self, req: RegisterRequest) -> RegisterResponse:
        no_store = "this controller runs the kubernetes backend: it has no worker store"
        return self.require_workers(no_store).register_worker(req)

    def reap_worker(self, worker_id: str, why: str, *, tell_autoscaler: bool = True) -> None:
        self.require_workers("no workers to reap").reap_worker(
            worker_id, why, tell_autoscaler=tell_autoscaler
        )

    def nudge(self, worker_id: str) -> bool:
        """A worker says one of its attempts changed: reconcile it now. False if unknown."""
        if not self.health.known(worker_id):
            return False
        self.loop.nudge(worker_id)
        return True

    def dry_run(self, spec: JobSpec, *, user: str | None = None) -> dict[str, Any]:
        why = "dry runs need the Iris scheduler; on kubernetes, Kueue decides placement"
        return self.require_workers(why).dry_run(spec, user=user)

    def cordon_worker(self, worker_id: str, mode: Mode, reason: str, *, automatic: bool = False) -> Cordon:
        seam = self.require_workers("cordons need worker daemons; on kubernetes, cordon the node")
        return seam.cordon_worker(worker_id, mode, reason, automatic=automatic)

    def uncordon_worker(self, worker_id: str) -> bool:
        return self.require_workers("uncordon needs worker daemons").uncordon_worker(worker_id)


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
