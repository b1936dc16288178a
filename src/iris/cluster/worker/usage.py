"""Samples what each running attempt's process tree uses: CPU seconds, RSS, peak RSS, a coarse history.

The runtime leaves a pid record (``<state>/pids/<uid>.json``) for every running attempt; this
thread reads them every ``interval_s``, walks each tree with psutil and keeps per-attempt totals
that the log shipper sends to the controller beside the attempt's log.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from iris.cluster.runtime.pid_records import load_pid_records
from iris.rpc.log_models import AttemptUsage, UsageSample

logger = logging.getLogger(__name__)

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


def tree_usage(pid: int) -> tuple[float, int] | None:
    """(CPU seconds, RSS bytes) of a process and its descendants; None if it is gone."""
    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.Error:
        return None
    cpu = 0.0
    rss = 0
    for proc in procs:
        try:
            with proc.oneshot():
                times = proc.cpu_times()
                cpu += times.user + times.system
                if proc is root:
                    cpu += times.children_user + times.children_system
                rss += proc.memory_info().rss
        except psutil.Error:
            continue
    return cpu, rss


class UsageSampler:
    def __init__(self, pids_dir: Path, *, interval_s: float = 0.5) -> None:
        self._pids_dir = Path(pids_dir)
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
        for record in load_pid_records(self._pids_dir):
            measured = tree_usage(record.pgid)
            if measured is None:
                continue
            cpu, rss = measured
            seen.add(record.attempt_uid)
            with self._lock:
                tally = self._tallies.setdefault(record.attempt_uid, _Tally())
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
