"""Bad machines: cordoned and draining workers, and automatic quarantine.

A *cordoned* worker takes no new work; what runs there runs on. A *draining* one takes no new
work either, and once ``drain_grace_s`` has passed its remaining tasks are preempted (moved to
other workers under their preemption budget). A worker on which attempts of
``quarantine_failures`` different jobs failed with infrastructure kinds (start/build failures,
a full disk, device errors, the machine's own OOM, the worker reporting the loss) within
``quarantine_window_s`` is cordoned by the controller itself, with the reason shown. Cordons live
in ``worker_cordons`` (migration 11) and survive restarts and re-registration; ``uncordon`` lifts one.

The classification and the window are pure; the controller does the I/O.
"""

from __future__ import annotations

import re
import sqlite3
from collections import deque
from dataclasses import dataclass
from typing import Literal

from iris.rpc.enums import TaskState

Mode = Literal["cordon", "drain"]


@dataclass(frozen=True, slots=True)
class Cordon:
    worker_id: str
    mode: Mode
    reason: str
    since: float
    automatic: bool = False


def load_cordons(cur: sqlite3.Cursor) -> dict[str, Cordon]:
    rows = cur.execute("SELECT worker_id, mode, reason, since, automatic FROM worker_cordons").fetchall()
    return {
        r["worker_id"]: Cordon(r["worker_id"], r["mode"], r["reason"], r["since"], bool(r["automatic"]))
        for r in rows
    }


def save_cordon(cur: sqlite3.Cursor, cordon: Cordon) -> None:
    cur.execute(
        "INSERT OR REPLACE INTO worker_cordons (worker_id, mode, reason, since, automatic) VALUES (?, ?, ?, ?, ?)",
        (cordon.worker_id, cordon.mode, cordon.reason, cordon.since, int(cordon.automatic)),
    )


def delete_cordon(cur: sqlite3.Cursor, worker_id: str) -> bool:
    cur.execute("DELETE FROM worker_cordons WHERE worker_id = ?", (worker_id,))
    return cur.rowcount > 0


# ---------------------------------------------------------------- infrastructure failures

_INFRA = re.compile(
    r"no space left on device|disk (?:is )?full|read-only file system|input/output error"
    r"|device error|nvidia|xid|cuda error|tpu (?:error|unavailable)|ecc error"
    r"|(?:machine|host|system|node) (?:is )?out of memory|oom of the machine",
    re.IGNORECASE,
)
_NOT_FOUND = re.compile(r"No such file or directory|command not found|not found in PATH", re.IGNORECASE)


def infrastructure_failure(state: TaskState, error: str | None) -> str | None:
    """The infrastructure kind of a failed attempt (None for the task's own failures)."""
    text = error or ""
    if state is TaskState.WORKER_FAILED:
        return "worker failure" + (f": {text}" if text else "")
    if state is not TaskState.FAILED or not text:
        return None
    if _INFRA.search(text):
        return text
    if text.startswith("could not") and not _NOT_FOUND.search(text):
        return text  # the worker could not fetch, build or start the attempt
    return None


class QuarantineWindow:
    """Infrastructure failures per worker within a window: when ``threshold`` different jobs
    failed on one worker, that worker should be cordoned (``record`` returns the reason)."""

    def __init__(self, threshold: int = 3, window_s: float = 600.0) -> None:
        self.threshold = threshold
        self.window_s = window_s
        self._seen: dict[str, deque[tuple[float, str, str]]] = {}

    def record(self, worker_id: str, job_id: str, kind: str, now: float) -> str | None:
        if self.threshold <= 0:
            return None
        events = self._seen.setdefault(worker_id, deque())
        events.append((now, job_id, kind))
        while events and events[0][0] < now - self.window_s:
            events.popleft()
        jobs = {job for _, job, _ in events}
        if len(jobs) < self.threshold:
            return None
        last = events[-1][2]
        events.clear()
        return (
            f"quarantined: attempts of {len(jobs)} jobs failed with infrastructure errors within "
            f"{self.window_s:g}s (last: {last[:200]})"
        )

    def forget(self, worker_id: str) -> None:
        self._seen.pop(worker_id, None)
