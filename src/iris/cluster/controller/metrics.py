"""Prometheus metrics of one controller, served at ``GET /metrics`` (docs/operations.md lists them).

Each controller owns its registry, so several controllers in one process never share series.
Counts of jobs, tasks and workers are read from the database when scraped (one GROUP BY query),
so they are exact and cost nothing between scrapes. Latencies are observed by the control loop
where they happen; API request times by an ASGI middleware keyed by the route template (never the
raw path, so job ids do not multiply the series).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram, disable_created_metrics, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from iris.cluster.controller import store
from iris.rpc.enums import JobState, TaskState, WorkerStatus

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

# Loop timings range from well under a millisecond (an idle pass) to seconds (a huge backlog).
LOOP_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
# Submit -> placed / running: milliseconds on an idle cluster, minutes or hours behind a queue.
WAIT_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 1800, 3600)  # fmt: skip
API_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0)

TASK_STATES = tuple(s.value for s in TaskState if s is not TaskState.MISSING)
JOB_STATES = tuple(s.value for s in JobState)
WORKER_STATUSES = tuple(s.value for s in WorkerStatus)


@dataclass(frozen=True)
class ClusterCounts:
    """What the scrape-time collector reads: rows per state, and autoscaler actions since the last read."""

    tasks: dict[str, int] = field(default_factory=dict[str, int])
    jobs: dict[str, int] = field(default_factory=dict[str, int])
    workers: dict[str, int] | None = None  # None: no worker store (kubernetes backend)
    new_actions: tuple[tuple[str, str], ...] = ()  # (scale group, action) per new action-log entry
    db_bytes: int = 0
    rounds: int = 0


class ControllerMetrics:
    """The loop's instruments plus a collector that reads ``ClusterCounts`` at scrape time."""

    def __init__(self) -> None:
        disable_created_metrics()  # no *_created series: they double the output and nobody graphs them
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.scheduling_pass_seconds = Histogram(
            "iris_scheduling_pass_seconds",
            "Duration of one scheduling pass over the pending tasks (snapshot, kernel, writes).",
            buckets=LOOP_BUCKETS,
            registry=r,
        )
        self.scheduler_stage_seconds = Histogram(
            "iris_scheduler_stage_seconds",
            "Time one scheduling pass spent in each stage: order, gate, place, reclaim (preempt), explain.",
            ["stage"],
            buckets=LOOP_BUCKETS,
            registry=r,
        )
        self.dispatch_latency_seconds = Histogram(
            "iris_dispatch_latency_seconds",
            "Job submission to the first attempt of a task being created (placed on a worker or given a pod).",
            buckets=WAIT_BUCKETS,
            registry=r,
        )
        self.task_start_latency_seconds = Histogram(
            "iris_task_start_latency_seconds",
            "Job submission to a task's first RUNNING observation.",
            buckets=WAIT_BUCKETS,
            registry=r,
        )
        self.reconcile_round_seconds = Histogram(
            "iris_reconcile_round_seconds",
            "Duration of one reconcile round (RPCs to the workers or the pod list, and applying what they report).",
            buckets=LOOP_BUCKETS,
            registry=r,
        )
        self.api_request_seconds = Histogram(
            "iris_api_request_seconds",
            "HTTP API requests by method and route template.",
            ["method", "route"],
            buckets=API_BUCKETS,
            registry=r,
        )
        self.autoscaler_actions = Counter(
            "iris_autoscaler_actions",
            "Autoscaler actions (scale_up, scale_down, slice_ready, boot_failed, ...) by scale group.",
            ["group", "action"],
            registry=r,
        )
        self._state_collector: _StateCollector | None = None

    def watch_state(self, read_counts: Callable[[], ClusterCounts]) -> None:
        """Publish the gauges that ``read_counts`` computes on every scrape (replacing an earlier source)."""
        if self._state_collector is not None:
            self.registry.unregister(self._state_collector)
        self._state_collector = _StateCollector(read_counts, self.autoscaler_actions)
        self.registry.register(self._state_collector)

    def exposition(self) -> bytes:
        """The Prometheus text format of every series."""
        return generate_latest(self.registry)


class _StateCollector(Collector):
    def __init__(self, read_counts: Callable[[], ClusterCounts], actions: Counter) -> None:
        self._read = read_counts
        self._actions = actions

    def describe(self) -> Iterable[Any]:
        return []  # the series are only known at scrape time

    def collect(self) -> Iterator[Any]:
        counts = self._read()
        for group, action in counts.new_actions:
            self._actions.labels(group=group, action=action).inc()
        yield _gauge("iris_tasks", "Tasks by state.", "state", TASK_STATES, counts.tasks)
        yield _gauge("iris_jobs", "Jobs by state.", "state", JOB_STATES, counts.jobs)
        if counts.workers is not None:
            yield _gauge(
                "iris_workers",
                "Registered workers by health status.",
                "status",
                WORKER_STATUSES,
                counts.workers,
            )
        db = GaugeMetricFamily("iris_controller_db_bytes", "Size of the SQLite database file.")
        db.add_metric([], counts.db_bytes)
        yield db
        rounds = CounterMetricFamily("iris_control_rounds", "Control-loop rounds run since start.")
        rounds.add_metric([], counts.rounds)
        yield rounds


def _gauge(
    name: str, doc: str, label: str, known: Iterable[str], values: dict[str, int]
) -> GaugeMetricFamily:
    """Every known label value appears (as 0 when absent), so a series never vanishes from a graph."""
    family = GaugeMetricFamily(name, doc, labels=[label])
    for value in dict.fromkeys([*known, *values]):
        family.add_metric([value], values.get(value, 0))
    return family


# ---------------------------------------------------------------- reading the database


class CountsReader:
    """Reads ``ClusterCounts`` for one controller: job and task histograms in one query, worker health
    from the tracker, and the autoscaler action-log rows appended since the previous read."""

    def __init__(self, controller: Any) -> None:
        self._controller = controller
        self._last_action_id = self._max_action_id()

    def _has_action_log(self) -> bool:
        return bool(self._controller.autoscaler_configured)

    def _max_action_id(self) -> int:
        if not self._has_action_log():
            return 0
        with self._controller.db.read() as cur:
            return store.last_autoscaler_action_id(cur)

    def __call__(self) -> ClusterCounts:
        c = self._controller
        tasks: dict[str, int] = {}
        jobs: dict[str, int] = {}
        actions: list[tuple[str, str]] = []
        worker_ids: list[str] | None = None
        with c.db.read() as cur:
            tasks = store.task_counts(cur)
            jobs = store.job_counts(cur)
            if c.backend_descriptor.kind.value == "worker-daemon":
                worker_ids = store.worker_ids(cur)
            if self._has_action_log():
                rows = store.autoscaler_actions_since(cur, self._last_action_id)
                if rows:
                    self._last_action_id = rows[-1][0]
                    actions = [(group, action) for _, group, action in rows]
        workers: dict[str, int] | None = None
        if worker_ids is not None:
            workers = {}
            for worker_id in worker_ids:
                status = c.health.status(worker_id).value
                workers[status] = workers.get(status, 0) + 1
        return ClusterCounts(
            tasks=tasks,
            jobs=jobs,
            workers=workers,
            new_actions=tuple(actions),
            db_bytes=c.db.size_bytes(),
            rounds=int(c.round_stats.get("rounds", 0)),
        )


# ---------------------------------------------------------------- API request timing


class RequestTimer:
    """ASGI middleware: observes each HTTP request's duration by method and route template."""

    def __init__(self, app: Any, histogram: Histogram) -> None:
        self.app = app
        self._histogram = histogram

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        try:
            await self.app(scope, receive, send)
        finally:
            self._histogram.labels(method=scope["method"], route=route_label(scope)).observe(
                time.perf_counter() - start
            )


def route_label(scope: dict[str, Any]) -> str:
    """The matched route's template (``/api/v1/jobs/{job_path:path}``); static files and misses are grouped."""
    route = scope.get("route")
    if route is None:
        return "unmatched"
    return str(getattr(route, "path", "")) or "static"  # the dashboard's files are mounted at "/"
