"""A ring of periodic task-count samples for the dashboard's charts (pending, running, throughput)."""

from __future__ import annotations

from collections import deque


class TimeSeries:
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
