"""The control loop: one thread running rounds, woken by submissions, nudges and the backend,
with the periodic tick as the safety net; and the round itself (``run_round`` = ``plan_round`` +
``apply_round``, then the backend's seam reconciles).

``plan_round`` reads one frozen snapshot and asks the pure round kernel for decisions; on the
WORKER backend the pending queue (scheduler/queue.py) decides which pending tasks a pass reads, so
a round's work grows with what changed, not with the backlog. ``apply_round`` commits through
``Controller.commit`` (guarded; stale decisions dropped and re-decided next round).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable
from dataclasses import replace
from typing import TYPE_CHECKING

from iris.cluster.controller import round_kernel as kernel
from iris.cluster.controller import store
from iris.cluster.controller.commit_news import CommitNews
from iris.cluster.controller.effects import Effects
from iris.cluster.controller.round_kernel import RoundPlan
from iris.cluster.controller.scheduler import PendingReason, TaskRequest
from iris.cluster.controller.scheduler.queue import PassScope, PendingQueue
from iris.rpc.errors import InsufficientStorage

if TYPE_CHECKING:
    from iris.cluster.controller.controller import Controller

log = logging.getLogger("iris.controller")
DISK_FULL_LOG_INTERVAL_S = 30.0  # a full state disk is logged once per this many seconds
TIMEOUT_SCAN_INTERVAL_S = 0.25  # execution timeouts and scheduling deadlines are read this often


class ControlLoop:
    def __init__(self, controller: Controller, queue: PendingQueue | None) -> None:
        self.c = controller
        # WORKER: which pending tasks a pass looks at (None: every pending task, every round).
        self.queue = queue
        self._queue_lock = threading.Lock()
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._signal_lock = threading.Lock()
        self._nudged: set[str] = set()
        self._dirty_workers: set[str] = set()
        self._last_full_round = 0.0
        self._disk_full_logged = float("-inf")
        self._last_timeout_scan = 0.0
        self._last_pass_s = 0.0  # what the last queued pass cost (snapshot and kernel)
        self.last_pending: dict[str, PendingReason] = {}

    # ------------------------------------------------------------ the thread and its signals

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="iris-control-loop", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        self._stopping.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
            self._thread = None

    def wake(self) -> None:
        self._wake.set()

    def nudge(self, worker_id: str) -> None:
        with self._signal_lock:
            self._nudged.add(worker_id)
        self._wake.set()

    def mark_dirty(self, worker_ids: Iterable[str]) -> None:
        with self._signal_lock:
            self._dirty_workers |= set(worker_ids)

    def _run(self) -> None:
        c = self.c
        while not self._stopping.is_set():
            timeout = max(0.0, self._last_full_round + c.tick_interval_s - c.clock())
            self._wake.wait(timeout=timeout)
            self._wake.clear()
            if self._stopping.is_set():
                return
            with self._signal_lock:
                nudged, self._nudged = self._nudged, set()
            full = c.clock() >= self._last_full_round + c.tick_interval_s
            try:
                if self.run_round(full=full, nudged=nudged):
                    self._wake.set()
            except InsufficientStorage as exc:  # one line per interval, not a traceback per round
                if c.clock() >= self._disk_full_logged + DISK_FULL_LOG_INTERVAL_S:
                    self._disk_full_logged = c.clock()
                    log.error("control rounds are not writing: %s", exc.message)
                self._stopping.wait(1.0)
            except Exception:  # the loop must survive any single bad round
                log.exception("control round failed")
                self._stopping.wait(0.2)

    # ------------------------------------------------------------ the round

    def run_round(self, *, full: bool = True, nudged: Iterable[str] = ()) -> bool:
        """One control round; returns True when it changed something worth another round at once."""
        c = self.c
        t0 = time.perf_counter()
        now = c.clock()
        if full:
            self._last_full_round = now
        c.bundles.maybe_collect(c.db, now)  # unused bundles, at most once a minute
        if c.timeseries.due(now):
            with c.db.read() as cur:
                c.timeseries.sample(now, store.task_counts(cur))
        changed = self.apply_round(self.plan_round(now))
        c.round_stats["last_schedule_ms"] = (time.perf_counter() - t0) * 1000
        if c.workers is not None:
            with self._signal_lock:
                targets, self._dirty_workers = self._dirty_workers | set(nudged), set()
            t2 = time.perf_counter()
            changed |= c.workers.reconcile(None if full else targets)
            c.round_stats["last_reconcile_ms"] = (time.perf_counter() - t2) * 1000
            if full or targets:
                c.metrics.reconcile_round_seconds.observe(time.perf_counter() - t2)
            c.workers.reap_unhealthy()
            c.workers.drain(c.clock())
            c.workers.autoscale()
        if c.pods is not None:
            t3 = time.perf_counter()
            changed |= c.pods.reconcile()
            c.metrics.reconcile_round_seconds.observe(time.perf_counter() - t3)
        c.round_stats["rounds"] += 1
        c.round_stats["last_round_ms"] = (time.perf_counter() - t0) * 1000
        return changed

    def plan_round(self, now: float | None = None) -> RoundPlan:
        """Read the round's snapshot and decide (writes nothing): placements, deadlines, preemptions."""
        c = self.c
        now = c.clock() if now is None else now
        started = time.perf_counter()
        deadlines = now - self._last_timeout_scan >= TIMEOUT_SCAN_INTERVAL_S
        if deadlines:
            self._last_timeout_scan = now
        queue, workers = self.queue, c.workers
        scope: PassScope | None = None
        with c.db.read() as cur:
            read_at = store.writes_so_far(cur)
            if queue is None or workers is None:
                snap = store.round_snapshot(cur, now, with_fleet=False, with_deadlines=deadlines)
            else:
                with self._queue_lock:
                    idle = queue.idle(now)
                if idle:  # nothing new, nothing parked: only deadlines to look at
                    snap = store.round_snapshot(cur, now, with_deadlines=deadlines, only=(set(), set()))
                else:  # only the pending tasks the queue says this pass must see
                    fleet = store.fleet(cur)
                    views, _ = kernel.fleet_views(fleet.workers, fleet.usage, workers.healthy(fleet.workers))
                    with self._queue_lock:
                        scope = queue.scope(views, now)
                    only = None if scope.full else (scope.jobs, scope.tasks)
                    snap = store.round_snapshot(
                        cur, now, with_deadlines=deadlines, known_fleet=fleet, only=only
                    )
        c.round_stats["last_pass_tasks"] = len(snap.pending)
        if not (snap.pending or snap.timed_out or snap.expired):
            return RoundPlan(effects=Effects(), now=now, unplaced=[] if workers else None, scope=scope)
        specs = c.specs.specs_for(
            {p.job_id: p.spec_json for p in snap.pending},
            [kernel.job_of(t.task_id) for t, _ in snap.timed_out],
        )
        if workers is not None:
            plan = kernel.plan_round(
                snap,
                specs,
                workers.healthy(snap.workers),
                now,
                budgets=c.budgets.effective(),
                recent_usage=c.usage.usage(now),
            )
            if plan.cores_by_user is not None:
                c.usage.observe(now, plan.cores_by_user)
            for stage, seconds in plan.stage_seconds.items():
                c.metrics.scheduler_stage_seconds.labels(stage).observe(seconds)
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
            with c.db.read() as cur:
                tasks = store.task_snapshots(cur, plan.victims)
                attempts = store.attempt_snapshots(
                    cur, [t.current_attempt_uid for t in tasks.values() if t.current_attempt_uid]
                )
            plan = plan.with_effects(kernel.preempt(plan.victims, tasks, attempts, now))
        if snap.pending:
            c.metrics.scheduling_pass_seconds.observe(time.perf_counter() - started)
        return plan

    def apply_round(self, plan: RoundPlan) -> bool:
        """Commit a round's decisions; any that a newer state overtook are dropped."""
        c = self.c
        if not plan.effects:
            if self.queue is not None and plan.scope is not None:
                self._passed(self.queue, plan.scope, plan)
            return False
        with c.db.transaction() as cur:
            applied = c.commit(cur, plan.effects, plan.now, read_at=plan.read_at)
        if self.queue is not None and plan.scope is not None:
            self._passed(self.queue, plan.scope, plan)
        for task_id, (_, number) in applied.attempts.items():
            submitted = plan.submitted_at.get(task_id)
            if number == 0 and submitted is not None:
                c.metrics.dispatch_latency_seconds.observe(max(0.0, plan.now - submitted))
        return plan.effects.urgent

    # ------------------------------------------------------------ the pending queue

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

    def committed(self, news: CommitNews) -> None:
        """After a transaction committed: the queue hears of new and departed pending work
        (``CommitNews.queue_news``), the workers whose desired sets changed are reconciled next round."""
        submitted, again, left = news.queue_news()
        if self.queue is not None and (submitted or again or left):
            with self._queue_lock:
                self.queue.forget(left)
                for job_id in submitted:
                    self.queue.job_submitted(job_id)
                for task_id in again:
                    self.queue.task_pending_again(task_id)
        if news.workers:
            self.mark_dirty(news.workers)

    def unplaced(self) -> list[TaskRequest]:
        if self.queue is None:
            return []
        with self._queue_lock:
            return self.queue.unplaced()

    def invalidate_queue(self) -> None:
        """Work parked as unplaceable may fit now (or no longer): the next pass looks at all of it."""
        if self.queue is not None:
            with self._queue_lock:
                self.queue.invalidate()
        self._wake.set()
