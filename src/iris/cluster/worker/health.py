"""The worker's self-reported health: host load, and whether its state dir can still take writes."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from pathlib import Path

import psutil

from iris.cluster.runtime.disk import MIN_FREE_INODES, free_inodes
from iris.rpc.models import WorkerHealth
from iris.rpc.units import format_bytes

# Below this much free space attempts cannot write their logs: the worker reports itself unhealthy.
MIN_FREE_DISK_BYTES = 32 * 1024 * 1024


def probe_health(
    state_dir: Path, running_attempts: int, min_free_bytes: int = MIN_FREE_DISK_BYTES
) -> WorkerHealth:
    """Measure now. disk_pressure (with the reason) when the state dir is full or not writable:
    the worker is alive and keeps its attempts, it only takes no new ones."""
    error: str | None = None
    disk_free = 0
    try:
        disk_free = psutil.disk_usage(str(state_dir)).free
    except OSError as exc:
        error = f"cannot read the disk usage of {state_dir}: {exc}"
    if error is None and disk_free < min_free_bytes:
        error = (
            f"disk full: {format_bytes(disk_free)} free in {state_dir}, need {format_bytes(min_free_bytes)}"
        )
    if error is None:
        inodes = free_inodes(state_dir)
        if inodes is not None and inodes < MIN_FREE_INODES:
            error = f"disk out of inodes: {inodes} free in {state_dir}, need {MIN_FREE_INODES}"
    if error is None:
        probe = state_dir / ".health-probe"
        try:
            with open(probe, "wb") as f:
                f.write(b"ok")
            os.unlink(probe)
        except OSError as exc:
            error = f"state dir {state_dir} is not writable: {exc.strerror or exc}"
    return WorkerHealth(
        healthy=True,
        disk_pressure=error is not None,
        error=error,
        running_attempts=running_attempts,
        cpu_percent=psutil.cpu_percent(interval=None),
        memory_used_bytes=psutil.virtual_memory().used,
        disk_free_bytes=disk_free,
    )


class HealthCache:
    """Reconcile answers carry health every time; measuring at most every ``max_age_s`` keeps that cheap."""

    def __init__(self, state_dir: Path, running_attempts: Callable[[], int], max_age_s: float = 1.0) -> None:
        self._state_dir = state_dir
        self._running_attempts = running_attempts
        self._max_age_s = max_age_s
        self._lock = threading.Lock()
        self._value: WorkerHealth | None = None
        self._at = 0.0
        psutil.cpu_percent(interval=None)  # the first call only starts the measuring window

    def current(self) -> WorkerHealth:
        running = self._running_attempts()
        with self._lock:
            now = time.monotonic()
            if self._value is None or now - self._at >= self._max_age_s:
                self._value = probe_health(self._state_dir, running)
                self._at = now
            return self._value.model_copy(update={"running_attempts": running})
