"""The controller's log store in process: what storing and reading attempts' logs costs it.

    uv run python benchmarks/log_push.py [--attempts 10000] [--megabytes 50] [--runs 3]

Cases, each on a fresh store under the system's temporary directory (``--dir`` elsewhere):

- small attempts: ``--attempts`` attempts of 2-5 lines each (the size of a short task's log: the
  worker's system lines), pushed as a worker's shipper pushes them: each request carries the
  lines of ``--batch`` new attempts and the final chunk (with usage) of the previous ones. The
  owners of new attempts are read from an SQLite table, as the controller's resolver reads its
  database. Figures: CPU time per attempt (``time.process_time``, so a loaded machine changes it
  little) and pushes per second of wall time.
- reading them back: the last 3 lines of each attempt (``tail``) and a job query (``--tail 3``
  over 1,000 attempts), CPU per attempt.
- a big log: one attempt of ``--megabytes`` MB pushed in 256 KiB requests (the shipper's bound),
  CPU per MB; then ``tail 3`` of it, which must cost what it returns.

Judge by CPU time; on a shared machine compare builds interleaved (old, new, old, new).
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import sqlite3
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from report import Report, add_common_args, at_most

from iris.cluster.controller.logstore import LogQuery, LogStore, run_query
from iris.rpc.log_models import AttemptUsage, LogChunk, LogPushRequest

# What storing a short task's log may cost the controller.
TARGET_US_PER_ATTEMPT = 120.0
TARGET_TAIL_MS = 50.0
BIG_CHUNK = 256 * 1024
SYSTEM_LINES = (
    "started process {pid}: true",
    "attempt SUCCEEDED: exit code 0 after 0.01s",
    "using 1 of 4 cores, 512 MB of 16 GB",
    "environment ready in 0.00s (cached)",
    "workspace bundle unpacked (12 files)",
)


class AttemptOwners:
    """Which task each attempt belongs to, read from SQLite under a lock like the controller's DB."""

    def __init__(self, path: Path, uids: Sequence[str]) -> None:
        self._conn = sqlite3.connect(str(path), check_same_thread=False, isolation_level=None)
        self._conn.execute("PRAGMA journal_mode=WAL")
        self._conn.execute(
            "CREATE TABLE attempts (attempt_uid TEXT PRIMARY KEY, task_id TEXT NOT NULL,"
            " attempt_number INTEGER NOT NULL)"
        )
        self._conn.execute("BEGIN")
        self._conn.executemany(
            "INSERT INTO attempts VALUES (?, ?, 0)", [(uid, f"/bench/job/{i}") for i, uid in enumerate(uids)]
        )
        self._conn.execute("COMMIT")
        self._lock = threading.RLock()

    def one(self, uid: str) -> tuple[str, int] | None:
        with self._lock:
            row = self._conn.execute(
                "SELECT task_id, attempt_number FROM attempts WHERE attempt_uid = ?", (uid,)
            ).fetchone()
        return (row[0], row[1]) if row is not None else None

    def many(self, uids: Sequence[str]) -> Mapping[str, tuple[str, int]]:
        out: dict[str, tuple[str, int]] = {}
        with self._lock:
            for i in range(0, len(uids), 500):
                part = list(uids[i : i + 500])
                marks = ",".join("?" * len(part))
                for uid, task_id, number in self._conn.execute(
                    f"SELECT attempt_uid, task_id, attempt_number FROM attempts WHERE attempt_uid IN ({marks})",
                    part,
                ):
                    out[uid] = (task_id, number)
        return out

    def close(self) -> None:
        with self._lock:
            self._conn.close()


def encode(ts: float, stream: str, text: str) -> str:
    return json.dumps({"ts": round(ts, 6), "stream": stream, "line": text}, separators=(",", ":")) + "\n"


def small_requests(uids: Sequence[str], batch: int, seed: int) -> list[LogPushRequest]:
    """Shipper-shaped requests: each has ``batch`` attempts' lines and the previous batch's final chunks."""
    rng = random.Random(seed)
    usage = AttemptUsage(cpu_seconds=0.01, rss_bytes=3_000_000, peak_rss_bytes=3_000_000, samples=1)
    t0 = 1_765_000_000.0
    firsts: list[LogChunk] = []
    finals: list[LogChunk] = []
    for i, uid in enumerate(uids):
        count = rng.randint(2, 5)
        ts = t0 + i * 0.001
        data = "".join(
            encode(ts + k * 1e-4, "system", SYSTEM_LINES[k].format(pid=1000 + i)) for k in range(count)
        )
        firsts.append(LogChunk(attempt_uid=uid, first_line=0, data=data))
        finals.append(LogChunk(attempt_uid=uid, first_line=count, data="", final=True, usage=usage))
    requests = []
    for start in range(0, len(uids) + batch, batch):
        chunks = firsts[start : start + batch] + finals[max(0, start - batch) : start]
        if chunks:
            requests.append(LogPushRequest(worker_id="w-1", chunks=chunks))
    return requests


def big_requests(uid: str, megabytes: int) -> list[LogPushRequest]:
    line = "x" * 90
    per_line = len(encode(0.0, "stdout", f"00000000 {line}"))
    lines_per_push = BIG_CHUNK // per_line
    total = megabytes * 1024 * 1024 // per_line
    requests = []
    t0 = 1_765_000_000.0
    for first in range(0, total, lines_per_push):
        end = min(total, first + lines_per_push)
        data = "".join(encode(t0 + n * 1e-5, "stdout", f"{n:08d} {line}") for n in range(first, end))
        requests.append(
            LogPushRequest(
                worker_id="w-1",
                chunks=[LogChunk(attempt_uid=uid, first_line=first, data=data, final=end == total)],
            )
        )
    return requests


def push_all(store: LogStore, requests: list[LogPushRequest], resolve) -> tuple[float, float]:
    """(CPU seconds, wall seconds) to push every request, checking each answer."""
    cpu, wall = time.process_time(), time.perf_counter()
    for request in requests:
        acks = store.push(request, resolve).acks
        for chunk in request.chunks:
            if acks[chunk.attempt_uid].lines < chunk.first_line:
                raise SystemExit(f"push refused: {chunk.attempt_uid} {acks[chunk.attempt_uid]}")
    return time.process_time() - cpu, time.perf_counter() - wall


def resolver(owners: AttemptOwners):
    """The resolver the store takes: the new attempts of one push at once."""
    return owners.many


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--attempts", type=int, default=10_000)
    parser.add_argument("--batch", type=int, default=50, help="new attempts per push request")
    parser.add_argument("--megabytes", type=int, default=50)
    parser.add_argument("--dir", type=Path, default=None, help="where the stores go (default: the temp dir)")
    parser.add_argument("--seed", type=int, default=7)
    add_common_args(parser)
    args = parser.parse_args()
    if args.tiny:
        args.attempts, args.megabytes, args.runs = 200, 1, 1
    report = Report(
        "log_push",
        args,
        {"attempts": args.attempts, "batch": args.batch, "megabytes": args.megabytes, "runs": args.runs},
    )
    uids = [f"{random.Random(args.seed + i).getrandbits(64):016x}" for i in range(args.attempts)]
    requests = small_requests(uids, args.batch, args.seed)
    big = big_requests("big0000000000000", args.megabytes)
    report.note(
        f"{len(requests)} requests for {len(uids)} attempts"
        f" ({sum(len(c.data) for r in requests for c in r.chunks) / len(uids):.0f} bytes of lines each);"
        f" big log: {len(big)} requests"
    )
    push_us: list[float] = []
    push_rate: list[float] = []
    tail_us: list[float] = []
    query_us: list[float] = []
    big_cpu: list[float] = []
    big_tail: list[float] = []
    for _ in range(args.runs):
        root = Path(tempfile.mkdtemp(prefix="iris-bench-logpush-", dir=args.dir))
        try:
            owners = AttemptOwners(root / "controller.sqlite3", [*uids, "big0000000000000"])
            store = LogStore(root / "logs")
            cpu, wall = push_all(store, requests, resolver(owners))
            push_us.append(cpu / len(uids) * 1e6)
            push_rate.append(len(requests) / wall)

            cpu = time.process_time()
            for uid in uids:
                if not store.segment(uid).tail(3):
                    raise SystemExit(f"attempt {uid} has no lines")
            tail_us.append((time.process_time() - cpu) / len(uids) * 1e6)
            attempts = store.attempts_of_tasks([f"/bench/job/{i}" for i in range(min(1000, len(uids)))])
            cpu = time.process_time()
            result = run_query(store, attempts, LogQuery(tail=3, include_system=True))
            query_us.append((time.process_time() - cpu) / len(attempts) * 1e6)
            if len(result.lines) != sum(min(3, a.lines) for a in attempts):
                raise SystemExit(f"job query returned {len(result.lines)} lines")

            cpu, _ = push_all(store, big, resolver(owners))
            big_cpu.append(cpu / args.megabytes * 1000)
            segment = store.segment("big0000000000000")
            start = time.perf_counter()
            last = segment.tail(3)
            big_tail.append((time.perf_counter() - start) * 1000)
            if len(last) != 3 or last[-1].offset != segment.lines - 1:
                raise SystemExit("the big log's tail is wrong")
            store.close()
            owners.close()
        finally:
            shutil.rmtree(root, ignore_errors=True)
    report.figure(
        f"push {len(uids)} small attempts (2-5 lines, {args.batch} a request): CPU per attempt",
        push_us,
        "us",
        at_most(TARGET_US_PER_ATTEMPT),
    )
    report.figure("  pushes/s (wall)", push_rate, "pushes/s")
    report.figure("  tail 3 of each small attempt: CPU per attempt", tail_us, "us")
    report.figure("  job query --tail 3 over 1,000 small attempts: CPU per attempt", query_us, "us")
    report.figure(f"push one {args.megabytes} MB log in 256 KiB requests: CPU per MB", big_cpu, "ms")
    report.figure(f"  tail 3 of the {args.megabytes} MB log", big_tail, "ms", at_most(TARGET_TAIL_MS))


if __name__ == "__main__":
    main()
