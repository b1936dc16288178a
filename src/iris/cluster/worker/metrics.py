"""Prometheus metrics of one worker daemon, served at ``GET /metrics`` (docs/operations.md lists them).

Attempt starts and ends are counted from the runtime's change notifications, each attempt once;
host load comes from the health cache the reconcile answers already use, so a scrape measures
nothing new.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator
from enum import Enum
from typing import Any

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Histogram,
    ProcessCollector,
    disable_created_metrics,
    generate_latest,
)
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from iris.rpc.enums import TERMINAL_TASK_STATES, TaskState
from iris.rpc.models import WorkerHealth

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
RECONCILE_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)
# Ended attempts remembered so a repeated notification (e.g. "released" after "finished") is not
# counted twice; far more than a worker keeps at once.
_REMEMBERED = 20_000


class Phase(Enum):
    STARTED = "started"
    FINISHED = "finished"


class WorkerMetrics:
    def __init__(
        self,
        *,
        running_attempts: Callable[[], int],
        health: Callable[[], WorkerHealth],
    ) -> None:
        disable_created_metrics()  # no *_created series: they double the output and nobody graphs them
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.attempts_started = Counter(
            "iris_worker_attempts_started", "Attempts whose process started on this worker.", registry=r
        )
        self.attempts_finished = Counter(
            "iris_worker_attempts_finished",
            "Attempts that ended on this worker, by outcome (SUCCEEDED, FAILED, KILLED, WORKER_FAILED...).",
            ["outcome"],
            registry=r,
        )
        self.reconcile_seconds = Histogram(
            "iris_worker_reconcile_seconds",
            "Reconcile requests served, and how long applying each took.",
            buckets=RECONCILE_BUCKETS,
            registry=r,
        )
        ProcessCollector(registry=r)  # process_cpu_seconds_total, process_resident_memory_bytes, fds
        r.register(_LoadCollector(running_attempts, health))
        self._seen: OrderedDict[str, Phase] = OrderedDict()
        # The counter of each outcome, looked up once (``labels()`` costs microseconds a call).
        self._finished_by_outcome: dict[TaskState, Any] = {}
        self._lock = threading.Lock()  # notifications come from several runtime threads

    def attempt_changed(self, attempt_uid: str, state: TaskState, started: bool) -> Phase | None:
        """Call on every runtime change notification with the attempt's state and whether its
        process ever started; returns the phase newly counted, if any."""
        with self._lock:
            previous = self._seen.get(attempt_uid)
            if state in TERMINAL_TASK_STATES:
                if previous is Phase.FINISHED:
                    return None
                if previous is None and started:
                    self.attempts_started.inc()  # started and ended between two notifications
                finished = self._finished_by_outcome.get(state)
                if finished is None:
                    finished = self._finished_by_outcome[state] = self.attempts_finished.labels(
                        outcome=state.value
                    )
                finished.inc()
                self._remember(attempt_uid, Phase.FINISHED)
                return Phase.FINISHED
            if previous is None and state is TaskState.RUNNING:
                self.attempts_started.inc()
                self._remember(attempt_uid, Phase.STARTED)
                return Phase.STARTED
            return None

    def _remember(self, attempt_uid: str, phase: Phase) -> None:
        self._seen[attempt_uid] = phase
        self._seen.move_to_end(attempt_uid)
        while len(self._seen) > _REMEMBERED:
            self._seen.popitem(last=False)

    def time_reconcile(self) -> _Timer:
        return _Timer(self.reconcile_seconds)

    def exposition(self) -> bytes:
        return generate_latest(self.registry)


class _Timer:
    def __init__(self, histogram: Histogram) -> None:
        self._histogram = histogram
        self._start = 0.0

    def __enter__(self) -> None:
        self._start = time.perf_counter()

    def __exit__(self, *exc: object) -> None:
        self._histogram.observe(time.perf_counter() - self._start)


class _LoadCollector(Collector):
    """Running attempts and host load, read when scraped."""

    def __init__(self, running_attempts: Callable[[], int], health: Callable[[], WorkerHealth]) -> None:
        self._running = running_attempts
        self._health = health

    def describe(self) -> Iterable[Any]:
        return []

    def collect(self) -> Iterator[Any]:
        health = self._health()
        for name, doc, value in (
            ("iris_worker_running_attempts", "Attempts on this worker that have not ended.", self._running()),
            ("iris_worker_host_cpu_percent", "CPU use of the whole machine, percent.", health.cpu_percent),
            (
                "iris_worker_host_memory_used_bytes",
                "Memory in use on the whole machine.",
                health.memory_used_bytes,
            ),
            (
                "iris_worker_disk_free_bytes",
                "Free space in the worker's state directory.",
                health.disk_free_bytes,
            ),
            ("iris_worker_healthy", "1 when the worker reports itself healthy, else 0.", int(health.healthy)),
        ):
            family = GaugeMetricFamily(name, doc)
            family.add_metric([], float(value or 0))
            yield family
