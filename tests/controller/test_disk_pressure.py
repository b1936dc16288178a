"""Disk pressure is its own condition: the worker keeps its tasks and is never reaped for it, but the
scheduler gives it no new work until the disk has room again."""

from __future__ import annotations

from iris.cluster.controller.worker_health import HealthEvent, WorkerHealthTracker
from iris.rpc.enums import WorkerStatus


def test_disk_pressure_degrades_without_reaping() -> None:
    health = WorkerHealthTracker(grace_s=1.0, min_failures=1)
    health.register("w", 0.0)
    for t in range(1, 30):
        health.apply("w", HealthEvent.REACHED, float(t))  # it answers every reconcile...
        health.set_disk_pressure("w", True)  # ...with a full disk
    assert health.status("w") is WorkerStatus.DEGRADED  # the scheduler places only on HEALTHY
    assert health.over_threshold(29.5) == []
    health.set_disk_pressure("w", False)
    assert health.status("w") is WorkerStatus.HEALTHY
