"""Samples what each running attempt's process tree uses: CPU seconds, RSS, peak RSS, a coarse history.

Every ``interval_s`` this thread asks the runtime which attempts may still have processes
(``live()``: uid, root pid and process group, from the start until the tree is released), reads
/proc ONCE for all of them (``proc_table``), and keeps per-attempt totals that the log shipper
sends to the controller beside the attempt's log. A tree is its process group plus every
descendant of its root; its CPU counts what the root has reaped of its children too.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from iris.cluster.runtime.proc_table import (
    CLOCK_TICKS,
    ProcTable,
    process_tree,
    scan_process_table,
    tree_rss,
)
from iris.rpc.log_models import AttemptUsage, UsageSample

logger = logging.getLogger(__name__)

# (attempt uid, root pid, process group id) of every attempt whose tree may still run.
LiveAttempts = Callable[[], Iterable[tuple[str, int, int]]]

HISTORY_POINTS = 120
_KEPT_FINISHED = 2000


@dataclass(slots=True)
class _Tally:
    cpu_seconds: float = 0.0
    rss_bytes: int = 0
    peak_rss_bytes: int = 0
    rss_sum: float = 0.0
    samples: int = 0
    history: list[UsageSample] = field(default_factory=list)
    history_every_s: float = 5.0
    last_point_at: float = 0.0
    live: bool = True

    def snapshot(self) -> AttemptUsage:
        return AttemptUsage(
            cpu_seconds=round(self.cpu_seconds, 3),
            rss_bytes=self.rss_bytes if self.live else 0,
            peak_rss_bytes=self.peak_rss_bytes,
            avg_rss_bytes=int(self.rss_sum / self.samples) if self.samples else 0,
            samples=self.samples,
            history=list(self.history),
        )


def tree_usage(table: ProcTable, root_pid: int, pgid: int) -> tuple[float, int] | None:
    """(CPU seconds, RSS bytes) of an attempt's tree, from one process table; None if it is gone."""
    root = table.get(root_pid)
    tree = process_tree(table, root_pid, pgid)
    if root is None and not tree:
        return None
    ticks = sum(table[pid].cpu_ticks for pid in tree)
    if root is not None:
        ticks += root.reaped_children_cpu_ticks
    return ticks / CLOCK_TICKS, tree_rss(table, tree)


class UsageSampler:
    def __init__(self, live: LiveAttempts, *, interval_s: float = 0.5) -> None:
        self._live = live
        self._interval_s = interval_s
        self._tallies: dict[str, _Tally] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="iris-usage", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.ident is not None:
            self._thread.join(timeout=5)

    def usage(self, attempt_uid: str) -> AttemptUsage | None:
        with self._lock:
            tally = self._tallies.get(attempt_uid)
            return tally.snapshot() if tally is not None else None

    def _loop(self) -> None:
        while not self._stop.wait(self._interval_s):
            try:
                self.sample()
            except Exception:
                logger.exception("usage sampling failed")

    def sample(self) -> None:
        now = time.time()
        seen: set[str] = set()
        live = list(self._live())
        table = scan_process_table() if live else {}
        for uid, root_pid, pgid in live:
            measured = tree_usage(table, root_pid, pgid)
            if measured is None:
                continue
            cpu, rss = measured
            seen.add(uid)
            with self._lock:
                tally = self._tallies.setdefault(uid, _Tally())
                tally.live = True
                tally.cpu_seconds = max(tally.cpu_seconds, cpu)
                tally.rss_bytes = rss
                tally.peak_rss_bytes = max(tally.peak_rss_bytes, rss)
                tally.rss_sum += rss
                tally.samples += 1
                if now - tally.last_point_at >= tally.history_every_s:
                    tally.last_point_at = now
                    tally.history.append(UsageSample(ts=now, cpu_seconds=tally.cpu_seconds, rss_bytes=rss))
                    if len(tally.history) >= HISTORY_POINTS:
                        # Coarser, not shorter: keep every other point and sample half as often.
                        tally.history = tally.history[::2]
                        tally.history_every_s *= 2
        with self._lock:
            for uid, tally in self._tallies.items():
                if uid not in seen:
                    tally.live = False
            finished = [uid for uid, t in self._tallies.items() if not t.live]
            for uid in finished[: max(0, len(finished) - _KEPT_FINISHED)]:
                del self._tallies[uid]
