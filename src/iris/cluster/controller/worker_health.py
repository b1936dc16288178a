"""WorkerHealthTracker: liveness from reconcile outcomes, reaping by wall-clock grace.

A worker is reaped when it has failed at least ``min_failures`` consecutive reconciles AND has
not been reached for ``grace_s`` seconds. The failure floor keeps one slow controller tick from
reaping the whole fleet; the grace keeps the decision in seconds, not in tick counts.

Reaping retries the worker's tasks elsewhere, so it must wait until the worker, if it is alive but
cut off, has killed them itself: a worker fences (kills its attempts) ``fence_after(grace)`` after
the last reconcile that renewed its lease. A request whose answer was lost may still have renewed
it, so the tracker holds the reap until the fence and the kill's escalation have run out after the
last such call. Only a call after an answered one renews the lease (``renew_lease``): the calls
that follow a lost answer, which a stopped worker may read from its socket much later, do not.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from enum import StrEnum

from iris.rpc.enums import WorkerStatus


class HealthEvent(StrEnum):
    REACHED = "REACHED"
    UNREACHABLE = "UNREACHABLE"
    BUILD_FAILED = "BUILD_FAILED"


# From a fence deadline to a dead attempt: the fence check's period (0.25 s), SIGTERM then SIGKILL
# after 2 s, and slack for a loaded machine.
KILL_ALLOWANCE_S = 3.0


def fence_after(reap_grace_s: float) -> float:
    """How long a worker may go unreconciled before it kills its own attempts: well inside the
    grace after which the controller reaps it (the tracker also waits ``KILL_ALLOWANCE_S`` after
    the fence before it reaps)."""
    return max(reap_grace_s / 2, reap_grace_s * 0.8 - KILL_ALLOWANCE_S)


@dataclass
class WorkerLiveness:
    last_reached: float
    # The end of the latest reconcile call that may have reached the worker (answered or not).
    last_maybe_arrived: float = 0.0
    consecutive_failures: int = 0
    build_failures: int = 0
    # Reported by the worker: alive, keeps its attempts, gets no new ones.
    disk_pressure: bool = False


class WorkerHealthTracker:
    def __init__(
        self, *, grace_s: float = 10.0, min_failures: int = 3, build_failure_threshold: int = 10
    ) -> None:
        self.grace_s = grace_s
        # After the last request that may have reached a worker, how long until its attempts are
        # surely dead (fenced and killed) if it is cut off.
        self.hold_s = fence_after(grace_s) + KILL_ALLOWANCE_S
        self.min_failures = min_failures
        self.build_failure_threshold = build_failure_threshold
        self._workers: dict[str, WorkerLiveness] = {}
        self._lock = threading.Lock()

    def register(self, worker_id: str, now: float) -> None:
        """Seed liveness; only registration may create an entry.

        Registering again proves nothing about reaching the worker: a worker that can call the
        controller but not be called by it (a one-way partition) re-registers forever. So a known
        worker keeps its failures and its last successful reconcile; only REACHED clears them.
        """
        with self._lock:
            if worker_id not in self._workers:
                self._workers[worker_id] = WorkerLiveness(last_reached=now, last_maybe_arrived=now)

    def apply(
        self, worker_id: str, event: HealthEvent, now: float, *, may_have_arrived: bool = False
    ) -> None:
        """``now`` is taken after the call ended; ``may_have_arrived``: the call renewed the
        worker's fencing lease, or may have (it asked to, and its answer was lost)."""
        with self._lock:
            entry = self._workers.get(worker_id)
            if entry is None:
                return  # an unknown (forgotten) worker is never resurrected by a report
            if may_have_arrived:
                entry.last_maybe_arrived = now
            if event is HealthEvent.REACHED:
                entry.last_reached = now
                entry.consecutive_failures = 0
            elif event is HealthEvent.UNREACHABLE:
                entry.consecutive_failures += 1
            else:
                entry.build_failures += 1

    def set_disk_pressure(self, worker_id: str, pressure: bool) -> None:
        with self._lock:
            entry = self._workers.get(worker_id)
            if entry is not None:
                entry.disk_pressure = pressure

    def forget(self, worker_id: str) -> None:
        with self._lock:
            self._workers.pop(worker_id, None)

    def known(self, worker_id: str) -> bool:
        with self._lock:
            return worker_id in self._workers

    def status(self, worker_id: str) -> WorkerStatus:
        with self._lock:
            entry = self._workers.get(worker_id)
            if entry is None:
                return WorkerStatus.DEAD
            degraded = entry.consecutive_failures or entry.disk_pressure
            return WorkerStatus.DEGRADED if degraded else WorkerStatus.HEALTHY

    def consecutive_failures(self, worker_id: str) -> int:
        with self._lock:
            entry = self._workers.get(worker_id)
            return entry.consecutive_failures if entry else 0

    def last_reached(self, worker_id: str) -> float | None:
        with self._lock:
            entry = self._workers.get(worker_id)
            return entry.last_reached if entry else None

    def over_threshold(self, now: float) -> list[str]:
        """Workers to reap now."""
        with self._lock:
            return [
                worker_id
                for worker_id, e in self._workers.items()
                if (
                    e.consecutive_failures >= self.min_failures
                    and now - e.last_reached >= self.grace_s
                    and now - e.last_maybe_arrived >= self.hold_s
                )
                or e.build_failures >= self.build_failure_threshold
            ]
