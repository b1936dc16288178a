"""The WORKER backend's seam of the controller: reconcile worker daemons, track their health,
register and reap them, cordon and drain them, drive the autoscaler, answer dry runs.

The decisions are pure functions (reconcile_kernel.py, round_kernel.py, the scheduler); this
module reads their inputs, applies their outputs and commits through the controller.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from iris.cluster.controller import round_kernel as kernel
from iris.cluster.controller import store
from iris.cluster.controller.autoscaler import demand_from_requests, slice_usage_from_workers
from iris.cluster.controller.backend import DesiredGroup
from iris.cluster.controller.capacity import dry_run_from_groups
from iris.cluster.controller.cordons import Cordon, Mode, delete_cordon, infrastructure_failure, save_cordon
from iris.cluster.controller.reconcile_kernel import read_reports, register_effects
from iris.cluster.controller.scheduler import Resources, TaskRequest, explain
from iris.cluster.controller.worker_health import fence_after
from iris.cluster.types import JobName
from iris.rpc.enums import ACTIVE_TASK_STATES, TERMINAL_TASK_STATES, WorkerStatus
from iris.rpc.errors import InvalidArgument, NotFound
from iris.rpc.models import AttemptObservation, JobSpec, RegisterRequest, RegisterResponse, ResourceSpec
from iris.rpc.signing import worker_secret

if TYPE_CHECKING:
    from iris.cluster.controller.controller import Controller

log = logging.getLogger("iris.controller")


class WorkerSeam:
    def __init__(self, controller: Controller) -> None:
        self.c = controller
        self._next_autoscale = 0.0

    # ------------------------------------------------------------ each round

    def reconcile(self, targets: set[str] | None) -> bool:
        """Send each worker (``targets``, or all) its desired set; fold what they observed."""
        c = self.c
        if (targets is not None and not targets) or c.backend is None:
            return False
        with c.db.read() as cur:
            workers = {w.worker_id: w for w in store.list_workers(cur)}
            ids = list(workers) if targets is None else [w for w in targets if w in workers]
            live = store.unreleased_attempts(cur, ids)
        by_worker: dict[str, list[store.LiveAttempt]] = {w: [] for w in ids}
        for a in live:
            by_worker.setdefault(a.worker_id or "", []).append(a)
        groups = {
            wid: DesiredGroup(
                tuple(c.desired(by_worker.get(wid, []))),
                wid,
                workers[wid].address,
                renew_lease=c.health.consecutive_failures(wid) == 0,
            )
            for wid in ids
        }
        reports = c.backend.converge(list(groups.values()))
        now = c.clock()
        readings, observations = read_reports(groups, reports)
        contacts: list[tuple[float, str | None, str]] = []
        for r in readings:
            c.health.apply(r.worker_id, r.event, now, may_have_arrived=r.may_have_arrived)
            if r.disk_pressure is not None:
                # A full disk is not a dead worker: it keeps its tasks and the scheduler skips it.
                c.health.set_disk_pressure(r.worker_id, r.disk_pressure)
                contacts.append((now, r.health_json, r.worker_id))
        changed = c.fold(observations, now)
        if contacts and (targets is None or changed):
            with c.db.transaction() as cur:
                store.touch_workers(cur, contacts)
        return changed

    def reap_unhealthy(self) -> None:
        """Reap workers past their grace: their attempts become WORKER_FAILED and retry elsewhere."""
        for worker_id in self.c.health.over_threshold(self.c.clock()):
            self.reap_worker(worker_id, "stopped answering reconciles")

    def autoscale(self) -> None:
        c = self.c
        if c.autoscaler is None:
            return
        now = c.clock()
        if now < self._next_autoscale:
            return
        self._next_autoscale = now + c.autoscale_interval_s
        with c.db.read() as cur:
            workers = store.list_workers(cur)
            usage = store.worker_usage(cur)
        busy_workers = {u.worker_id for u in usage if u.state in ACTIVE_TASK_STATES}
        # A slice with a quarantined worker is replaced, and released once its tasks are gone.
        quarantined = {
            w.slice_id
            for w in workers
            if w.slice_id and (cordon := c.cordons.get(w.worker_id)) and cordon.automatic
        }
        plan = c.autoscaler.tick(
            demand_from_requests(c.last_unplaced, c.last_pending),
            slice_usage_from_workers(workers, busy_workers),
            quarantined,
        )
        for worker_id in [w for t in plan.terminates for w in t.worker_ids]:
            # Terminated slices take their workers with them: drop them now, not after a grace period.
            self.reap_worker(worker_id, "its slice was scaled down", tell_autoscaler=False)
        for worker_id in c.autoscaler.released_workers:
            self.reap_worker(worker_id, "its slice was quarantined and replaced", tell_autoscaler=False)

    def healthy(self, workers: Iterable[store.WorkerRow]) -> set[str]:
        """The workers new work may go to: healthy and not cordoned or draining."""
        cordons = self.c.cordons
        health = self.c.health
        return {
            w.worker_id
            for w in workers
            if health.status(w.worker_id) is WorkerStatus.HEALTHY and w.worker_id not in cordons
        }

    # ------------------------------------------------------------ register, reap

    def register_worker(self, req: RegisterRequest) -> RegisterResponse:
        c = self.c
        now = c.clock()
        worker_id = req.worker_id or f"worker-{secrets.token_hex(4)}"
        with c.db.transaction() as cur:
            others = {
                w: store.worker_snapshot(cur, w)
                for w in store.worker_ids_at_address(cur, req.address)
                if w != worker_id
            }
            c.commit(cur, register_effects(worker_id, req, others, now), now)
        for old in others:
            c.health.forget(old)
        c.health.register(worker_id, now)
        c.mark_dirty({worker_id})
        c.wake()
        return RegisterResponse(
            worker_id=worker_id,
            reconcile_interval_s=c.tick_interval_s,
            rpc_secret=worker_secret(c.worker_rpc_key, req.address).hex(),
            fence_after_s=fence_after(c.health.grace_s),
        )

    def reap_worker(self, worker_id: str, why: str, *, tell_autoscaler: bool = True) -> None:
        """The worker is gone: its attempts are lost (their tasks retry elsewhere)."""
        c = self.c
        now = c.clock()
        with c.db.transaction() as cur:
            snap = store.worker_snapshot(cur, worker_id)
            c.commit(cur, kernel.reap_worker(snap, worker_id, why, now), now)
        log.warning("reaped worker %s: %s", worker_id, why, extra={"worker_id": worker_id})
        c.health.forget(worker_id)
        if tell_autoscaler and c.autoscaler is not None:
            c.autoscaler.reap_worker(worker_id)
        c.wake()

    # ------------------------------------------------------------ cordons

    def cordon_worker(self, worker_id: str, mode: Mode, reason: str, *, automatic: bool = False) -> Cordon:
        """Take no new work on the worker (``drain``: and move its tasks after the grace)."""
        c = self.c
        with c.db.read() as cur:
            known = {w.worker_id for w in store.list_workers(cur)}
        if worker_id not in known:
            raise NotFound(f"worker {worker_id} is not registered")
        now = c.clock()
        previous = c.cordons.get(worker_id)
        since = previous.since if previous is not None and previous.mode == mode else now
        cordon = Cordon(
            worker_id, mode, reason or ("draining" if mode == "drain" else "cordoned"), since, automatic
        )
        with c.db.transaction() as cur:
            save_cordon(cur, cordon)
        c.cordons = {**c.cordons, worker_id: cordon}
        log.warning(
            "worker %s %s: %s", worker_id, "draining" if mode == "drain" else "cordoned", cordon.reason
        )
        c.fleet_changed()
        return cordon

    def uncordon_worker(self, worker_id: str) -> bool:
        c = self.c
        with c.db.transaction() as cur:
            removed = delete_cordon(cur, worker_id)
        c.cordons = {k: v for k, v in c.cordons.items() if k != worker_id}
        c.quarantine.forget(worker_id)
        if removed:
            log.info("worker %s uncordoned", worker_id)
            c.fleet_changed()
        return removed

    def quarantine(
        self, observations: Mapping[str, AttemptObservation], snap: store.ObservationSnapshot
    ) -> None:
        """Count infrastructure failures per worker; cordon a worker that crossed the threshold."""
        c = self.c
        now = c.clock()
        for uid, obs in observations.items():
            attempt = snap.attempts.get(uid)
            if attempt is None or attempt.worker_id is None or attempt.state in TERMINAL_TASK_STATES:
                continue
            kind = infrastructure_failure(obs.state, obs.error)
            if kind is None:
                continue
            reason = c.quarantine.record(attempt.worker_id, kernel.job_of(attempt.task_id), kind, now)
            if reason is not None and attempt.worker_id not in c.cordons:
                try:
                    self.cordon_worker(attempt.worker_id, "cordon", reason, automatic=True)
                except NotFound:
                    pass

    def drain(self, now: float) -> None:
        """Preempt the tasks still running on workers drained longer than the grace."""
        c = self.c
        due = [
            d.worker_id for d in c.cordons.values() if d.mode == "drain" and now - d.since >= c.drain_grace_s
        ]
        if not due:
            return
        with c.db.read() as cur:
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
            with c.db.transaction() as cur:
                c.commit(cur, effects, now)

    # ------------------------------------------------------------ dry run

    def dry_run(self, spec: JobSpec, *, user: str | None = None) -> dict[str, Any]:
        """Would this job place now, and where? Runs the real kernel on a snapshot; writes nothing."""
        c = self.c
        try:
            name = JobName.root(user or spec.user or "anonymous", spec.name)
        except ValueError as exc:
            raise InvalidArgument(str(exc)) from None
        now = c.clock()
        with c.db.read() as cur:
            snap = store.round_snapshot(cur, now, with_deadlines=False)
            workers = snap.workers or store.list_workers(cur)
            usage = snap.usage or store.worker_usage(cur)
        if not workers and c.autoscaler is not None:
            would, summary = dry_run_from_groups(spec, c.autoscaler.groups)
            return {"job_id": str(name), "would_place": would, "summary": summary}
        views, running = kernel.fleet_views(workers, usage, self.healthy(workers))
        specs = c.specs.specs_for({p.job_id: p.spec_json for p in snap.pending}, [])
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
