"""The controller: one control loop that schedules, reconciles and keeps house.

The loop sleeps until woken (a submission, a worker's nudge, a kill) or until the periodic tick,
which is only the safety net. Each round reads a snapshot, calls the pure kernels and writes
the outcome in one transaction. The backend kind decides which seams run: the Iris scheduler,
worker reconcile and worker health for WORKER; Pod reconciliation for KUBERNETES.
"""

from __future__ import annotations

import logging
import secrets
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, Protocol

from iris.cluster.backends.worker_daemon import WorkerRpcClient
from iris.cluster.controller import store
from iris.cluster.controller.auth import Authenticator
from iris.cluster.controller.autoscaler import demand_from_requests, slice_usage_from_workers
from iris.cluster.controller.backend import BackendDescriptor, BackendKind, TaskTarget
from iris.cluster.controller.bundles import BundleStore
from iris.cluster.controller.capacity import dry_run_from_groups, workers_misfit
from iris.cluster.controller.db import ControllerDB
from iris.cluster.controller.job_state import rollup_job_state
from iris.cluster.controller.logstore import LogStore
from iris.cluster.controller.logstore.pod_collector import PodLogCollector
from iris.cluster.controller.metrics import ControllerMetrics
from iris.cluster.controller.scheduler import (
    Resources,
    RunningTask,
    TaskRequest,
    WorkerView,
    explain,
    schedule,
)
from iris.cluster.controller.task_state import (
    Observation,
    TaskSnapshot,
    apply_observation,
    retry_or_terminal,
    stop_attempt,
)
from iris.cluster.controller.worker_health import HealthEvent, WorkerHealthTracker
from iris.cluster.types import JobName
from iris.rpc.enums import (
    ACTIVE_TASK_STATES,
    TERMINAL_JOB_STATES,
    TERMINAL_TASK_STATES,
    JobState,
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
    Unavailable,
)
from iris.rpc.models import (
    AttemptObservation,
    DesiredAttempt,
    EndpointInfo,
    EndpointRegistration,
    JobSpec,
    ReconcileRequest,
    RegisterRequest,
    RegisterResponse,
    ResourceSpec,
    RunSpec,
)
from iris.rpc.signing import load_or_create_key, new_master_key, worker_secret

log = logging.getLogger("iris.controller")
DISK_FULL_LOG_INTERVAL_S = 30.0  # a full state disk is logged once per this many seconds


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


class PodBackend(Protocol):
    """What the controller needs from the Kubernetes backend."""

    controller_url: str

    def reconcile(self, desired: Sequence[DesiredAttempt]) -> list[AttemptObservation]: ...

    def close(self) -> None: ...


def _job_of(task_id: str) -> str:
    return task_id.rsplit("/", 1)[0]


class Controller:
    def __init__(
        self,
        descriptor: BackendDescriptor,
        db: ControllerDB,
        *,
        controller_url: str = "",
        autoscaler: Any | None = None,
        pod_backend: PodBackend | None = None,
        tick_interval_s: float = 1.0,
        worker_grace_s: float = 10.0,
        clock: Callable[[], float] = time.time,
        bundle_dir: Path | None = None,
        worker_rpc_key: bytes | None = None,
        log_dir: Path | None = None,
    ) -> None:
        self._descriptor = descriptor
        # Signs every call to a worker daemon; each worker gets its derived secret at registration.
        self.worker_rpc_key = worker_rpc_key or new_master_key()
        self.db = db
        self.bundles = BundleStore(bundle_dir)
        # Task logs and usage, kept after their workers are gone (written by the API, not this loop).
        self.logs = LogStore(log_dir)
        self._pod_logs: PodLogCollector | None = None
        self.controller_url = controller_url
        self.autoscaler = autoscaler
        self.pod_backend = pod_backend
        self.tick_interval_s = tick_interval_s
        self.clock = clock
        self.started_at = clock()
        self.health = WorkerHealthTracker(grace_s=worker_grace_s)
        self.auth = Authenticator()
        self.worker_rpc = (
            WorkerRpcClient(master_key=self.worker_rpc_key) if descriptor.kind is BackendKind.WORKER else None
        )
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._signal_lock = threading.Lock()
        self._nudged: set[str] = set()
        self._dirty_workers: set[str] = set()
        self._spec_cache: OrderedDict[str, JobSpec] = OrderedDict()
        self._last_full_round = 0.0
        self._disk_full_logged = float("-inf")
        self._last_timeout_scan = 0.0
        self._next_autoscale = 0.0
        self.autoscale_interval_s = 1.0
        self.last_unplaced: list[TaskRequest] = []
        self.last_pending: dict[str, Any] = {}
        self.timeseries = TimeSeries()
        self.metrics = ControllerMetrics()
        self.round_stats: dict[str, float] = {
            "rounds": 0,
            "last_round_ms": 0.0,
            "last_schedule_ms": 0.0,
            "last_reconcile_ms": 0.0,
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
        if self.pod_backend is not None:
            self.pod_backend.controller_url = url

    def start(self) -> None:
        if self._thread is not None:
            return
        watch = getattr(self.pod_backend, "watch_changes", None)
        if watch is not None:
            watch(self.wake)  # pod events wake the loop; the periodic tick stays the safety net
        self._thread = threading.Thread(target=self._loop, name="iris-control-loop", daemon=True)
        self._thread.start()
        self.logs.start()
        if self._descriptor.kind is BackendKind.KUBERNETES and self.pod_backend is not None:
            self._pod_logs = PodLogCollector(self, self.logs).start()

    def stop(self) -> None:
        self._stopping.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
            self._thread = None
        if self.worker_rpc is not None:
            self.worker_rpc.close()
        if self._pod_logs is not None:
            self._pod_logs.stop()
        if self.pod_backend is not None:
            self.pod_backend.close()
        self.logs.close()

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

    def run_round(self, *, full: bool = True, nudged: Iterable[str] = ()) -> bool:
        """One control round; returns True when it changed something worth another round at once."""
        t0 = time.perf_counter()
        now = self.clock()
        if full:
            self._last_full_round = now
        changed = self._housekeeping(now)
        if self.timeseries.due(now):
            with self.db.read() as cur:
                self.timeseries.sample(now, store.task_counts(cur))
        descriptor = self._descriptor
        if descriptor.kind is BackendKind.WORKER:
            t1 = time.perf_counter()
            targets = self._schedule(now)
            self.round_stats["last_schedule_ms"] = (time.perf_counter() - t1) * 1000
            with self._signal_lock:
                targets |= self._dirty_workers
                self._dirty_workers = set()
            targets |= set(nudged)
            t2 = time.perf_counter()
            changed |= self._reconcile_workers(None if full else targets)
            self.round_stats["last_reconcile_ms"] = (time.perf_counter() - t2) * 1000
            if full or targets:
                self.metrics.reconcile_round_seconds.observe(time.perf_counter() - t2)
            self._update_worker_health()
            self._trigger_autoscale()
        if descriptor.kind is BackendKind.KUBERNETES:
            self._dispatch_to_pods(now)
            t3 = time.perf_counter()
            changed |= self._reconcile_pods()
            self.metrics.reconcile_round_seconds.observe(time.perf_counter() - t3)
        self.round_stats["rounds"] += 1
        self.round_stats["last_round_ms"] = (time.perf_counter() - t0) * 1000
        return changed

    # ------------------------------------------------------------ commands

    def submit(self, spec: JobSpec, *, user: str | None = None) -> str:
        now = self.clock()
        try:
            if spec.parent_job_id:
                parent = JobName.parse(spec.parent_job_id)
                job_name = parent.child(spec.name)
            else:
                job_name = JobName.root(user or spec.user or "anonymous", spec.name)
        except ValueError as exc:
            raise InvalidArgument(str(exc)) from None
        if spec.coscheduling and spec.replicas < 1:
            raise InvalidArgument("a coscheduled job needs at least one replica")
        self._check_fits_somewhere(spec)
        if spec.bundle_id is not None and not self.bundles.exists(spec.bundle_id):
            raise FailedPrecondition(f"bundle {spec.bundle_id} was never uploaded to this controller")
        job_id = str(job_name)
        with self.db.transaction() as cur:
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
                spec = inherit_from_parent(spec, self._job_spec(spec.parent_job_id, parent_row.spec_json))
            existing = store.get_job(cur, job_id)
            if existing is not None:
                if spec.existing_job_policy == "keep":
                    return job_id
                if spec.existing_job_policy == "error" or existing.state not in TERMINAL_JOB_STATES:
                    raise AlreadyExists(f"job {job_id} already exists ({existing.state.value.lower()})")
                store.delete_job_tree(cur, job_id)
                self._spec_cache.pop(job_id, None)
            store.insert_job(
                cur,
                job_id=job_id,
                spec=spec,
                user=job_name.user,
                parent_job_id=spec.parent_job_id,
                root_job_id="/" + job_name.namespace,
                depth=job_name.depth,
                now=now,
                root_submitted_at=root_submitted_at,
            )
            store.add_events(
                cur, [(now, "job_submitted", job_id, None, None, None, f"submitted {spec.replicas} task(s)")]
            )
        log.info("job %s submitted: %d task(s)", job_id, spec.replicas, extra={"job_id": job_id})
        self.wake()
        return job_id

    def _check_fits_somewhere(self, spec: JobSpec) -> None:
        """Reject at submit a job that no registered worker and no scale group could ever host
        (unless it asks to wait for capacity); see capacity.py."""
        if self._descriptor.kind is not BackendKind.WORKER or spec.wait_for_capacity:
            return
        gang = spec.replicas if spec.coscheduling else 1
        group_by = spec.coscheduling.group_by if spec.coscheduling else None
        with self.db.read() as cur:
            workers = [(w.worker_id, w.capacity, w.attributes) for w in store.list_workers(cur)]
        worker_reason = workers_misfit(
            workers, spec.resources, spec.constraints, replicas=gang, group_by=group_by
        )
        if not self.autoscaler_configured:
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
            self._terminate_job(cur, job_id, JobState.KILLED, "stopped by request", StopReason.CANCELLED, now)
        self.wake()
        return JobState.KILLED

    def register_worker(self, req: RegisterRequest) -> RegisterResponse:
        if self._descriptor.kind is not BackendKind.WORKER:
            raise FailedPrecondition("this controller runs the kubernetes backend: it has no worker store")
        now = self.clock()
        worker_id = req.worker_id or f"worker-{secrets.token_hex(4)}"
        with self.db.transaction() as cur:
            stale = [w for w in store.worker_ids_at_address(cur, req.address) if w != worker_id]
            store.upsert_worker(
                cur,
                worker_id=worker_id,
                address=req.address,
                capacity=req.capacity,
                attributes=req.attributes,
                slice_id=req.slice_id,
                scale_group=req.scale_group,
                now=now,
            )
            store.add_events(
                cur, [(now, "worker_registered", None, None, None, worker_id, f"registered at {req.address}")]
            )
            for old in stale:
                self._reap_worker(cur, old, f"worker {worker_id} now answers at {req.address}", now)
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

    def job_active(self, job_id: str) -> bool:
        """The job exists and has not finished (a job token works only while this holds)."""
        with self.db.read() as cur:
            job = store.get_job(cur, job_id)
        return job is not None and job.state not in TERMINAL_JOB_STATES

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

    def task_target(self, task_id: str, attempt_uid: str | None = None) -> tuple[TaskTarget, str]:
        """Where RPCs about a task's (current or given) attempt go; raises NotFound."""
        with self.db.read() as cur:
            task = store.get_task(cur, task_id)
            if task is None:
                raise NotFound(f"task {task_id} does not exist")
            uid = attempt_uid or task["current_attempt_uid"]
            if uid is None:
                raise FailedPrecondition(f"task {task_id} has not started yet")
            attempt = store.get_attempt(cur, uid)
        if attempt is None or attempt["task_id"] != task_id:
            raise NotFound(f"attempt {uid} of task {task_id} does not exist")
        if self._descriptor.kind is BackendKind.KUBERNETES:
            return TaskTarget(attempt_uid=uid), uid
        if not attempt["worker_address"]:
            raise FailedPrecondition(f"the worker that ran task {task_id} is gone")
        return TaskTarget(address=attempt["worker_address"]), uid

    # ------------------------------------------------------------ WORKER seams

    def _schedule(self, now: float) -> set[str]:
        """Place pending tasks on workers; returns workers that got new work or stops."""
        started = time.perf_counter()
        snap = self._scheduling_snapshot()
        if snap is None:
            self.last_unplaced = []
            return set()
        pending, views, running, requests, waiting_gang = snap
        result = schedule(requests, views, running)
        self.last_pending = dict(result.pending)
        placed = {t for t, _ in result.assignments}
        self.last_unplaced = [r for r in requests if r.task_id not in placed]
        old_reasons = {p["task_id"]: p["pending_reason"] for p in pending}
        touched: set[str] = set()
        jobs: set[str] = set()
        with self.db.transaction() as cur:
            numbers = store.next_attempt_numbers(cur, [t for t, _ in result.assignments])
            gang_members = [(r.task_id, r.job_id) for r in requests if r.group_by and r.task_id in placed]
            gangs = self._gang_generations(cur, gang_members)
            for task_id, worker_id in result.assignments:
                uid = secrets.token_hex(8)
                store.insert_attempt(
                    cur,
                    attempt_uid=uid,
                    task_id=task_id,
                    attempt_number=numbers[task_id],
                    worker_id=worker_id,
                    now=now,
                    gang=gangs.get(task_id),
                )
                touched.add(worker_id)
                jobs.add(_job_of(task_id))
            for pre in result.preemptions:
                self._preempt(cur, pre.victim_task_id, pre.preemptor_task_id, now)
                touched.add(pre.worker_id)
            reasons = [(r.message, t) for t, r in result.pending.items() if old_reasons.get(t) != r.message]
            reasons += [
                ("waiting for the other members of its gang to stop", t)
                for t in waiting_gang
                if old_reasons.get(t) != "waiting for the other members of its gang to stop"
            ]
            if reasons:
                store.set_pending_reasons(cur, reasons)
            self._rollup(cur, jobs, now)
        submitted = {p["task_id"]: p["submitted_at"] for p in pending}
        for task_id, _ in result.assignments:
            if numbers[task_id] == 0:
                self.metrics.dispatch_latency_seconds.observe(max(0.0, now - submitted[task_id]))
        self.metrics.scheduling_pass_seconds.observe(time.perf_counter() - started)
        return touched

    def _scheduling_snapshot(
        self,
    ) -> tuple[list[Any], list[WorkerView], list[RunningTask], list[TaskRequest], list[str]] | None:
        """Pending tasks, workers with their free capacity, and running work, as kernel inputs."""
        with self.db.read() as cur:
            pending = store.pending_tasks(cur)
            if not pending:
                return None
            workers = store.list_workers(cur)
            usage = store.worker_usage(cur)
        views, running = self._fleet(workers, usage)
        requests: list[TaskRequest] = []
        by_job: dict[str, int] = {}
        for p in pending:
            by_job[p["job_id"]] = by_job.get(p["job_id"], 0) + 1
        gang_jobs = {p["job_id"] for p in pending if p["group_by"]}
        with self.db.read() as cur:
            stopping = store.jobs_with_live_attempts(cur, gang_jobs)
        waiting_gang: list[str] = []
        for p in pending:
            if p["group_by"] and p["job_id"] in stopping:
                waiting_gang.append(p["task_id"])  # members still stopping: the gang moves as one
                continue
            spec = self._job_spec(p["job_id"], p["spec_json"])
            requests.append(
                TaskRequest(
                    task_id=p["task_id"],
                    job_id=p["job_id"],
                    user=p["user"],
                    resources=_resources(p),
                    constraints=tuple(spec.constraints),
                    preferences=tuple(spec.preferences),
                    band=p["priority"],
                    depth=p["depth"],
                    root_submitted_at=p["root_submitted_at"],
                    submitted_at=p["submitted_at"],
                    group_by=p["group_by"],
                    # A gang places its unfinished tasks together (members that succeeded stay done).
                    gang_size=by_job[p["job_id"]] if p["group_by"] else 1,
                )
            )
        return pending, views, running, requests, waiting_gang

    def _fleet(
        self, workers: Sequence[store.WorkerRow], usage: Sequence[Any]
    ) -> tuple[list[WorkerView], list[RunningTask]]:
        used: dict[str, list[int]] = {}
        running: list[RunningTask] = []
        for u in usage:
            acc = used.setdefault(u["worker_id"], [0, 0, 0, 0])
            acc[0] += u["cpu_millicores"]
            acc[1] += u["memory_bytes"]
            acc[2] += u["disk_bytes"]
            acc[3] += u["device_count"]
            stopping = u["stop_reason"] is not None or TaskState(u["state"]) not in ACTIVE_TASK_STATES
            running.append(
                RunningTask(
                    task_id=u["task_id"],
                    job_id=u["job_id"],
                    worker_id=u["worker_id"],
                    resources=_resources(u),
                    band=u["priority"],
                    started_at=u["started_at"] or 0.0,
                    group_by=u["group_by"],
                    stopping=stopping,  # capacity already being freed: never a victim twice
                )
            )
        views = []
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
                    schedulable=self.health.status(w.worker_id) is WorkerStatus.HEALTHY,
                )
            )
        return views, running

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
        with self.db.read() as cur:
            workers = store.list_workers(cur)
            usage = store.worker_usage(cur)
        if not workers and self.autoscaler_configured:
            would, summary = dry_run_from_groups(spec, self.autoscaler.groups)
            return {"job_id": str(name), "would_place": would, "summary": summary}
        views, running = self._fleet(workers, usage)
        snap = self._scheduling_snapshot()
        queued = snap[3] if snap else []
        now = self.clock()
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

    def _preempt(self, cur: Any, victim_task_id: str, preemptor: str, now: float) -> None:
        task = store.task_snapshots(cur, [victim_task_id])[victim_task_id]
        if task.current_attempt_uid is None or task.state not in ACTIVE_TASK_STATES:
            return
        attempt = store.attempt_snapshots(cur, [task.current_attempt_uid])[task.current_attempt_uid]
        tr = stop_attempt(task, attempt, StopReason.PREEMPTED, now)
        store.write_attempt(cur, tr.attempt)
        new_task = retry_or_terminal(
            task, TaskState.PREEMPTED, never_started=attempt.state is TaskState.ASSIGNED, now=now
        )
        store.write_task(cur, new_task, pending_reason=f"preempted by {preemptor}")
        store.add_events(
            cur,
            [
                (
                    now,
                    "task_preempted",
                    _job_of(victim_task_id),
                    victim_task_id,
                    attempt.attempt_uid,
                    None,
                    f"preempted by {preemptor}",
                )
            ],
        )
        self._rollup(cur, {_job_of(victim_task_id)}, now)

    def _gang_generations(self, cur: Any, members: Sequence[tuple[str, str]]) -> dict[str, tuple[int, int]]:
        """(generation, size) for gang members dispatched together now, keyed by task id."""
        by_job: dict[str, list[str]] = {}
        for task_id, job_id in members:
            by_job.setdefault(job_id, []).append(task_id)
        generations = store.next_gang_generations(cur, list(by_job))
        return {t: (generations[job], len(tasks)) for job, tasks in by_job.items() for t in tasks}

    def _desired(self, live: Sequence[store.LiveAttempt]) -> list[DesiredAttempt]:
        new_uids = [a.attempt_uid for a in live if a.state is TaskState.ASSIGNED and a.stop_reason is None]
        gangs: dict[str, tuple[int, int]] = {}
        if new_uids:
            with self.db.read() as cur:
                gangs = store.gang_of_attempts(cur, new_uids)
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
                    spec = spec.model_copy(update={"gang_generation": generation, "gang_size": size})
                desired.append(DesiredAttempt(attempt_uid=a.attempt_uid, intent="run", spec=spec))
            else:
                desired.append(DesiredAttempt(attempt_uid=a.attempt_uid, intent="run"))
        return desired

    def _reconcile_workers(self, targets: set[str] | None) -> bool:
        if targets is not None and not targets:
            return False
        with self.db.read() as cur:
            workers = {w.worker_id: w for w in store.list_workers(cur)}
            ids = list(workers) if targets is None else [w for w in targets if w in workers]
            live = store.unreleased_attempts(cur, ids)
        by_worker: dict[str, list[store.LiveAttempt]] = {w: [] for w in ids}
        for a in live:
            by_worker.setdefault(a.worker_id or "", []).append(a)
        plans = {
            wid: (
                workers[wid].address,
                ReconcileRequest(worker_id=wid, attempts=self._desired(by_worker.get(wid, []))),
            )
            for wid in ids
        }
        assert self.worker_rpc is not None
        outcomes = self.worker_rpc.reconcile_many(plans)
        now = self.clock()
        observations: dict[str, AttemptObservation] = {}
        contacts = []
        for out in outcomes:
            if out.response is None:
                self.health.apply(out.worker_id, HealthEvent.UNREACHABLE, now)
                continue
            health = out.response.health
            self.health.apply(
                out.worker_id, HealthEvent.REACHED if health.healthy else HealthEvent.UNREACHABLE, now
            )
            # A full disk is not a dead worker: it keeps its tasks and the scheduler skips it.
            self.health.set_disk_pressure(out.worker_id, health.disk_pressure)
            contacts.append((now, health.model_dump_json(), out.worker_id))
            asked = {d.attempt_uid for d in plans[out.worker_id][1].attempts}
            for obs in out.response.observations:
                if obs.attempt_uid in asked:  # never trust reports about attempts we did not ask about
                    observations[obs.attempt_uid] = obs
        changed = self._apply_observations(observations, now)
        if contacts and (targets is None or changed):
            with self.db.transaction() as cur:
                store.touch_workers(cur, contacts)
        return changed

    def _update_worker_health(self) -> None:
        """Reap workers past their grace: their attempts become WORKER_FAILED and retry elsewhere."""
        now = self.clock()
        dead = self.health.over_threshold(now)
        if not dead:
            return
        with self.db.transaction() as cur:
            for worker_id in dead:
                self._reap_worker(cur, worker_id, "stopped answering reconciles", now)
        for worker_id in dead:
            self.health.forget(worker_id)
            if self.autoscaler is not None:
                self.autoscaler.reap_worker(worker_id)
        self.wake()

    def _reap_worker(self, cur: Any, worker_id: str, why: str, now: float) -> None:
        live = store.unreleased_attempts(cur, [worker_id])
        obs = {
            a.attempt_uid: AttemptObservation(
                attempt_uid=a.attempt_uid,
                state=TaskState.WORKER_FAILED,
                error=f"worker {worker_id} was lost: {why}",
                runtime_released=True,
            )
            for a in live
        }
        self._apply_in(cur, obs, now)
        store.delete_worker(cur, worker_id)
        store.add_events(cur, [(now, "worker_reaped", None, None, None, worker_id, why)])
        log.warning("reaped worker %s: %s", worker_id, why, extra={"worker_id": worker_id})

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
        busy_workers = {u["worker_id"] for u in usage if TaskState(u["state"]) in ACTIVE_TASK_STATES}
        plan = self.autoscaler.tick(
            demand_from_requests(self.last_unplaced, self.last_pending),
            slice_usage_from_workers(workers, busy_workers),
        )
        gone = [w for t in plan.terminates for w in t.worker_ids]
        if gone:
            # Terminated slices take their workers with them: drop them now, not after a grace period.
            now = self.clock()
            with self.db.transaction() as cur:
                for worker_id in gone:
                    self._reap_worker(cur, worker_id, "its slice was scaled down", now)
            for worker_id in gone:
                self.health.forget(worker_id)

    # ------------------------------------------------------------ KUBERNETES seams

    def _dispatch_to_pods(self, now: float) -> None:
        """Kueue places the work: every pending task gets its attempt (and so its Pod) at once."""
        with self.db.read() as cur:
            pending = store.pending_tasks(cur)
        if not pending:
            return
        gang_jobs = {p["job_id"] for p in pending if p["group_by"]}
        with self.db.read() as cur:
            stopping = store.jobs_with_live_attempts(cur, gang_jobs)
        # A gang is dispatched as one pod group, once none of its previous members still runs.
        pending = [p for p in pending if p["job_id"] not in stopping]
        if not pending:
            return
        with self.db.transaction() as cur:
            ids = [p["task_id"] for p in pending]
            numbers = store.next_attempt_numbers(cur, ids)
            gangs = self._gang_generations(
                cur, [(p["task_id"], p["job_id"]) for p in pending if p["group_by"]]
            )
            for task_id in ids:
                store.insert_attempt(
                    cur,
                    attempt_uid=secrets.token_hex(8),
                    task_id=task_id,
                    attempt_number=numbers[task_id],
                    worker_id=None,
                    now=now,
                    gang=gangs.get(task_id),
                )
            self._rollup(cur, {_job_of(t) for t in ids}, now)
        for p in pending:
            if numbers[p["task_id"]] == 0:
                self.metrics.dispatch_latency_seconds.observe(max(0.0, now - p["submitted_at"]))

    def _reconcile_pods(self) -> bool:
        if self.pod_backend is None:
            return False
        with self.db.read() as cur:
            live = store.unreleased_attempts(cur)
        desired = self._desired(live)
        try:
            observations = self.pod_backend.reconcile(desired)
        except Unavailable as exc:
            log.warning("pod reconcile skipped this round: %s", exc.message)
            return False
        asked = {d.attempt_uid for d in desired}
        return self._apply_observations(
            {o.attempt_uid: o for o in observations if o.attempt_uid in asked}, self.clock()
        )

    # ------------------------------------------------------------ shared state changes

    def _apply_observations(self, observations: dict[str, AttemptObservation], now: float) -> bool:
        if not observations:
            return False
        with self.db.transaction() as cur:
            return self._apply_in(cur, observations, now)

    def _apply_in(self, cur: Any, observations: dict[str, AttemptObservation], now: float) -> bool:
        attempts = store.attempt_snapshots(cur, observations)
        workers = store.attempt_workers(cur, list(observations))
        tasks = store.task_snapshots(cur, {a.task_id for a in attempts.values()})
        changed = False
        jobs: set[str] = set()
        events = []
        first_runs: dict[str, float] = {}
        for uid, obs in observations.items():
            attempt = attempts.get(uid)
            if attempt is None:
                continue
            task = tasks[attempt.task_id]
            tr = apply_observation(task, attempt, _observation(obs), now)
            if tr.attempt != attempt or (obs.message and attempt.state is TaskState.ASSIGNED):
                store.write_attempt(cur, tr.attempt, message=obs.message)
                if tr.attempt.released != attempt.released or tr.attempt.state in TERMINAL_TASK_STATES:
                    changed = True
            if tr.task != task:
                pending_reason = None
                if tr.task.state is TaskState.PENDING:
                    pending_reason = (
                        f"retrying after {tr.attempt.state.value.lower()}: {tr.task.error or ''}".strip(": ")
                    )
                store.write_task(cur, tr.task, pending_reason=pending_reason)
                tasks[task.task_id] = tr.task
                jobs.add(_job_of(task.task_id))
                if tr.task.state is not task.state:
                    changed = (
                        changed or tr.task.state in TERMINAL_TASK_STATES or tr.task.state is TaskState.PENDING
                    )
                    if task.started_at is None and tr.task.started_at is not None:
                        first_runs[task.task_id] = tr.task.started_at
                    if tr.task.state not in (TaskState.BUILDING, TaskState.RUNNING, TaskState.SUCCEEDED):
                        log.info(
                            "task %s %s after attempt %s: %s",
                            task.task_id,
                            tr.task.state.value,
                            uid,
                            tr.task.error or tr.attempt.state.value.lower(),
                            extra={
                                "job_id": _job_of(task.task_id),
                                "task_id": task.task_id,
                                "attempt_uid": uid,
                            },
                        )
                    events.append(
                        (
                            now,
                            f"task_{tr.task.state.value.lower()}",
                            _job_of(task.task_id),
                            task.task_id,
                            uid,
                            workers.get(uid),
                            tr.task.error or tr.task.state.value,
                        )
                    )
            elif obs.message and tr.task.state is TaskState.ASSIGNED:
                cur.execute(
                    "UPDATE tasks SET pending_reason = ? WHERE task_id = ?", (obs.message, task.task_id)
                )
        if events:
            store.add_events(cur, events)
        self._observe_start_latency(cur, first_runs)
        self._gang_follow_up(cur, tasks, jobs, now)
        self._rollup(cur, jobs, now)
        return changed

    def _observe_start_latency(self, cur: Any, first_runs: dict[str, float]) -> None:
        """Submission -> first RUNNING, for tasks that just ran for the first time."""
        if not first_runs:
            return
        job_ids = sorted({_job_of(t) for t in first_runs})
        submitted: dict[str, float] = {}
        for i in range(0, len(job_ids), 500):
            chunk = job_ids[i : i + 500]
            marks = ",".join("?" * len(chunk))
            submitted.update(
                cur.execute(
                    f"SELECT job_id, submitted_at FROM jobs WHERE job_id IN ({marks})", chunk
                ).fetchall()
            )
        for task_id, started_at in first_runs.items():
            at = submitted.get(_job_of(task_id))
            if at is not None:
                self.metrics.task_start_latency_seconds.observe(max(0.0, started_at - at))

    def _gang_follow_up(self, cur: Any, tasks: dict[str, TaskSnapshot], jobs: set[str], now: float) -> None:
        """A gang moves as one: a lost member bounces its running siblings, a dead one ends them."""
        for job_id in jobs:
            job = store.get_job(cur, job_id)
            if job is None or not job.spec.coscheduling or job.state in TERMINAL_JOB_STATES:
                continue
            rows = store.tasks_of_job(cur, job_id)
            states = {r["task_id"]: TaskState(r["state"]) for r in rows}
            dead = any(
                s in (TaskState.FAILED, TaskState.WORKER_FAILED, TaskState.PREEMPTED) for s in states.values()
            )
            retrying = any(s is TaskState.PENDING for s in states.values()) and any(
                s in ACTIVE_TASK_STATES for s in states.values()
            )
            if not dead and not retrying:
                continue
            for r in rows:
                if TaskState(r["state"]) not in ACTIVE_TASK_STATES:
                    continue
                snap = store.task_snapshots(cur, [r["task_id"]])[r["task_id"]]
                if snap.current_attempt_uid:
                    attempt = store.attempt_snapshots(cur, [snap.current_attempt_uid])[
                        snap.current_attempt_uid
                    ]
                    tr = stop_attempt(
                        snap, attempt, StopReason.JOB_TERMINATED if dead else StopReason.PREEMPTED, now
                    )
                    why = "a member of its gang failed" if dead else "its gang is being rescheduled together"
                    store.write_attempt(cur, replace(tr.attempt, state=TaskState.COSCHED_FAILED, error=why))
                    self._mark_dirty(cur, snap.current_attempt_uid)
                if dead:
                    new = replace(
                        snap,
                        state=TaskState.COSCHED_FAILED,
                        finished_at=now,
                        error="a member of its gang failed",
                    )
                    store.write_task(cur, new)
                else:
                    store.write_task(
                        cur,
                        replace(snap, state=TaskState.PENDING),
                        pending_reason="its gang is being rescheduled together",
                    )

    def _rollup(self, cur: Any, job_ids: Iterable[str], now: float) -> None:
        for job_id in job_ids:
            job = store.get_job(cur, job_id)
            if job is None or job.state in TERMINAL_JOB_STATES:
                continue
            counts = store.task_state_counts(cur, job_id)
            new = rollup_job_state(
                job.state,
                counts,
                max_task_failures=self._job_spec(job_id, job.spec_json).max_task_failures,
                ever_started=job.started_at is not None,
            )
            if new is job.state:
                continue
            if new is JobState.RUNNING:
                store.update_job(cur, job_id, state=new, started_at=job.started_at or now)
                continue
            if new in TERMINAL_JOB_STATES:
                self._finish_job(cur, job, new, now)
            else:
                store.update_job(cur, job_id, state=new)

    def _finish_job(self, cur: Any, job: store.JobRow, state: JobState, now: float) -> None:
        rows = store.tasks_of_job(cur, job.job_id)
        exit_code: int | None = None
        error: str | None = None
        if state is JobState.SUCCEEDED:
            exit_code = 0
        else:
            for r in rows:
                if r["state"] in (
                    TaskState.FAILED.value,
                    TaskState.UNSCHEDULABLE.value,
                    TaskState.WORKER_FAILED.value,
                ):
                    exit_code = r["exit_code"] if r["exit_code"] not in (None, 0) else 1
                    error = f"task {r['task_index']}: {r['error'] or r['state'].lower()}"
                    break
        if job.started_at is None:
            starts = [r["started_at"] for r in rows if r["started_at"] is not None]
            if starts:
                store.update_job(cur, job.job_id, started_at=min(starts))
        self._terminate_job(
            cur, job.job_id, state, error, StopReason.JOB_TERMINATED, now, exit_code=exit_code
        )

    def _terminate_job(
        self,
        cur: Any,
        job_id: str,
        state: JobState,
        error: str | None,
        reason: StopReason,
        now: float,
        *,
        exit_code: int | None = None,
    ) -> None:
        """Make a job terminal, kill its live tasks and every live descendant job."""
        self._kill_tasks(cur, job_id, reason, now)
        store.delete_endpoints_of_job(cur, job_id)
        store.update_job(cur, job_id, state=state, finished_at=now, error=error, exit_code=exit_code)
        store.add_events(
            cur, [(now, f"job_{state.value.lower()}", job_id, None, None, None, error or state.value)]
        )
        log.info("job %s %s%s", job_id, state.value, f": {error}" if error else "", extra={"job_id": job_id})
        self._spec_cache.pop(job_id, None)
        for child in store.live_descendants(cur, job_id):
            self._kill_tasks(cur, child, StopReason.JOB_TERMINATED, now)
            store.update_job(
                cur, child, state=JobState.KILLED, finished_at=now, error="parent job terminated"
            )
            store.add_events(cur, [(now, "job_killed", child, None, None, None, "parent job terminated")])

    def _kill_tasks(self, cur: Any, job_id: str, reason: StopReason, now: float) -> None:
        task_ids = store.active_tasks_of_job(cur, job_id)
        if not task_ids:
            return
        snaps = store.task_snapshots(cur, task_ids)
        attempts = store.attempt_snapshots(
            cur, [s.current_attempt_uid for s in snaps.values() if s.current_attempt_uid]
        )
        for snap in snaps.values():
            attempt = attempts.get(snap.current_attempt_uid or "")
            if attempt is not None and not attempt.released:
                tr = stop_attempt(snap, attempt, reason, now)
                store.write_attempt(cur, tr.attempt)
                self._mark_dirty(cur, attempt.attempt_uid)
            store.write_task(
                cur,
                replace(snap, state=TaskState.KILLED, finished_at=now, error=snap.error or "killed"),
            )

    def _housekeeping(self, now: float) -> bool:
        """Execution timeouts and scheduling deadlines (and, once a minute, unused bundles)."""
        if now - self._last_timeout_scan < 0.25:
            return False
        self.bundles.maybe_collect(self.db, now)
        self._last_timeout_scan = now
        changed = False
        with self.db.read() as cur:
            timed_out = [
                r["task_id"]
                for r in store.running_with_timeouts(cur)
                if r["started_at"] and now - r["started_at"] > r["timeout_s"]
            ]
            expired = store.expired_pending(cur, now)
        if timed_out:
            with self.db.transaction() as cur:
                snaps = store.task_snapshots(cur, timed_out)
                attempts = store.attempt_snapshots(
                    cur, [s.current_attempt_uid for s in snaps.values() if s.current_attempt_uid]
                )
                for snap in snaps.values():
                    attempt = attempts.get(snap.current_attempt_uid or "")
                    if attempt is None:
                        continue
                    tr = stop_attempt(snap, attempt, StopReason.TASK_TIMEOUT, now)
                    store.write_attempt(cur, tr.attempt)
                    self._mark_dirty(cur, attempt.attempt_uid)
                    timeout = self._job_spec(_job_of(snap.task_id)).timeout_s
                    store.write_task(
                        cur,
                        replace(
                            snap,
                            state=TaskState.FAILED,
                            finished_at=now,
                            exit_code=None,
                            error=f"timed out after {timeout:g}s",
                        ),
                    )
                self._rollup(cur, {_job_of(t) for t in timed_out}, now)
            changed = True
        if expired:
            with self.db.transaction() as cur:
                snaps = store.task_snapshots(cur, [r["task_id"] for r in expired])
                attempts = store.attempt_snapshots(
                    cur, [s.current_attempt_uid for s in snaps.values() if s.current_attempt_uid]
                )
                for r in expired:
                    snap = snaps[r["task_id"]]
                    attempt = attempts.get(snap.current_attempt_uid or "")
                    if snap.state is TaskState.ASSIGNED and attempt is not None and not attempt.released:
                        # Placed but never started (a pod Kueue never admitted): take it back.
                        store.write_attempt(
                            cur, stop_attempt(snap, attempt, StopReason.JOB_TERMINATED, now).attempt
                        )
                        self._mark_dirty(cur, attempt.attempt_uid)
                    reason = r["pending_reason"] or "it never fit"
                    error = f"scheduling timeout: {reason}"
                    store.write_task(
                        cur,
                        replace(snap, state=TaskState.UNSCHEDULABLE, finished_at=now, error=error),
                    )
                self._rollup(cur, {r["job_id"] for r in expired}, now)
            changed = True
        return changed

    def _mark_dirty(self, cur: Any, attempt_uid: str) -> None:
        row = cur.execute("SELECT worker_id FROM attempts WHERE attempt_uid = ?", (attempt_uid,)).fetchone()
        if row and row[0]:
            with self._signal_lock:
                self._dirty_workers.add(row[0])

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
            if len(self._spec_cache) > 10_000:
                self._spec_cache.popitem(last=False)
        return spec

    def _run_spec(self, a: store.LiveAttempt) -> RunSpec:
        spec = self._job_spec(a.job_id)
        env = dict(spec.env)
        if self.auth.enabled:
            # The task acts as its job's user: sub-jobs, endpoints and its bundle need no other secret.
            env["IRIS_TOKEN"] = self.auth.job_token(a.job_id, JobName.parse(a.job_id).user)
        return RunSpec(
            attempt_uid=a.attempt_uid,
            attempt_number=a.attempt_number,
            job_id=a.job_id,
            task_id=a.task_id,
            task_index=a.task_index,
            entrypoint=spec.entrypoint,
            resources=spec.resources,
            env=env,
            environment=spec.environment,
            timeout_s=None,  # the controller enforces execution timeouts itself (no retry)
            ports=spec.ports,
            bundle_id=spec.bundle_id,
            priority=spec.priority,
            constraints=spec.constraints,
            replicas=spec.replicas,
            coscheduling=spec.coscheduling,
            user=JobName.parse(a.job_id).user,
        )


def inherit_from_parent(child: JobSpec, parent: JobSpec) -> JobSpec:
    """A sub-job runs in its parent's world: workspace bundle, environment variables and pip
    environment carry over unless the child names its own (its own env vars win key by key)."""
    update: dict[str, Any] = {}
    if child.bundle_id is None and parent.bundle_id is not None:
        update["bundle_id"] = parent.bundle_id
    if parent.env:
        update["env"] = {**parent.env, **child.env}
    if child.environment is None and parent.environment is not None:
        update["environment"] = parent.environment
    return child.model_copy(update=update) if update else child


def _resources(row: Any) -> Resources:
    return Resources(
        cpu_millicores=row["cpu_millicores"],
        memory_bytes=row["memory_bytes"],
        disk_bytes=row["disk_bytes"],
        device_type=row["device_type"],
        device_variant=row["device_variant"],
        device_count=row["device_count"],
    )


def _observation(obs: AttemptObservation) -> Observation:
    return Observation(
        state=obs.state,
        exit_code=obs.exit_code,
        error=obs.error,
        started_at=obs.started_at,
        finished_at=obs.finished_at,
        runtime_released=obs.runtime_released,
        message=obs.message,
    )


def fence_after(reap_grace_s: float) -> float:
    """How long a worker may go unreconciled before it kills its own attempts: well inside the
    grace after which the controller reaps it (and retries its tasks elsewhere), leaving time for
    the kill itself (SIGTERM, then SIGKILL after 2 s)."""
    return max(reap_grace_s / 2, reap_grace_s * 0.8 - 3.0)


def create_controller(
    descriptor: BackendDescriptor,
    *,
    state_dir: str | Path | None = None,
    autoscaler: Any | None = None,
    pod_backend: PodBackend | None = None,
    controller_url: str = "",
    **options: Any,
) -> Controller:
    """Build an in-process controller without starting any thread or server."""
    db = ControllerDB(Path(state_dir) / "controller.sqlite3" if state_dir is not None else ":memory:")
    if state_dir is not None:
        options.setdefault("worker_rpc_key", load_or_create_key(Path(state_dir) / "worker-rpc.key"))
    return Controller(
        descriptor,
        db,
        bundle_dir=Path(state_dir) / "bundles" if state_dir is not None else None,
        log_dir=Path(state_dir) / "logs" if state_dir is not None else None,
        controller_url=controller_url,
        autoscaler=autoscaler,
        pod_backend=pod_backend,
        **options,
    )
