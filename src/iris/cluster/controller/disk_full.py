"""A full state disk is reported in one log line per interval, however many requests it refuses."""

from __future__ import annotations

import logging
import threading
import time

logger = logging.getLogger("iris.cluster.controller")

DISK_FULL_LOG_INTERVAL_S = 30.0
_lock = threading.Lock()
_last = [float("-inf")]


def note_disk_full(message: str, *, interval_s: float = DISK_FULL_LOG_INTERVAL_S) -> bool:
    """Log ``message`` unless a full disk was logged less than ``interval_s`` ago; True if logged."""
    now = time.monotonic()
    with _lock:
        if now < _last[0] + interval_s:
            return False
        _last[0] = now
    logger.error("%s (refusing writes with 507; logged at most once per %gs)", message, interval_s)
    return True
