"""Benchmark of the scheduling kernel: one pass over 1,000 workers x 10,000 pending tasks.

    uv run python benchmarks/scheduler_kernel.py [--runs 5] [--check]

Cases:
- mixed: cpu workers in three zones (some tainted), gpu workers, tpu slices of 4; tasks of
  many shapes, some with zone / pool / device constraints, a few 4-task gangs, three bands,
  50 users. Most tasks place. Reports placements/s (target >= 50,000) and pass time.
- nothing fits: every worker is full of same-band work, so all 10,000 tasks need a reason
  (and a preemption attempt that finds nothing). Reports pass time.

``--check`` exits non-zero when the mixed case is under the target.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time

from report import Report, add_common_args, at_least

from iris.cluster.controller.scheduler import Resources, RunningTask, TaskRequest, WorkerView, schedule
from iris.rpc.enums import PriorityBand
from iris.rpc.models import Constraint

GB = 1000**3
TARGET_PLACEMENTS_PER_S = 50_000
ZONES = ("us-east", "us-west", "eu-west")
BANDS = (PriorityBand.PRODUCTION, PriorityBand.INTERACTIVE, PriorityBand.INTERACTIVE, PriorityBand.BATCH)


def make_workers(count: int, rng: random.Random, full: bool = False) -> list[WorkerView]:
    workers = []
    for n in range(count):
        zone = ZONES[n % len(ZONES)]
        attributes = {"zone": zone, "pool": f"pool-{n % 7}"}
        if n % 10 < 8:
            capacity = Resources(32_000, 128 * GB, 500 * GB)
            if n % 50 == 0:
                attributes["taint:maintenance"] = "true"
        elif n % 10 == 8:
            variant = "h100" if n % 20 == 8 else "a100"
            capacity = Resources(64_000, 512 * GB, 2000 * GB, "gpu", variant, 8)
        else:
            capacity = Resources(96_000, 256 * GB, 1000 * GB, "tpu", "v5p", 4)
            attributes["tpu-name"] = f"slice-{n // 40}"
        used = capacity if full else Resources(rng.choice((0, 2000, 4000)), rng.choice((0, 8, 16)) * GB)
        workers.append(WorkerView(f"worker-{n:04d}", capacity, used, attributes))
    return workers


def make_pending(count: int, rng: random.Random) -> list[TaskRequest]:
    zone_constraints = {zone: (Constraint(key="zone", value=zone),) for zone in ZONES}
    pool_constraint = (Constraint(key="pool", op="IN", values=["pool-1", "pool-2", "pool-3"]),)
    tasks: list[TaskRequest] = []
    job = 0
    while len(tasks) < count:
        job += 1
        user = f"user-{rng.randrange(50)}"
        band = rng.choice(BANDS)
        submitted = float(job)
        kind = rng.random()
        constraints: tuple[Constraint, ...] = ()
        group_by = None
        if kind < 0.01:  # a gang of 4 on one tpu slice
            size, group_by = 4, "tpu-name"
            resources = Resources(8000, 32 * GB, 0, "tpu", "v5p", 4)
        elif kind < 0.06:
            size = rng.choice((1, 2, 4))
            variant = rng.choice(("h100", "a100", ""))
            resources = Resources(4000, 64 * GB, 0, "gpu", variant, rng.choice((1, 2, 4)))
        else:
            size = rng.choice((1, 4, 16, 64))
            resources = Resources(rng.choice((500, 1000, 2000)), rng.choice((1, 2, 4)) * GB)
            roll = rng.random()
            if roll < 0.3:
                constraints = zone_constraints[rng.choice(ZONES)]
            elif roll < 0.4:
                constraints = pool_constraint
        size = min(size, count - len(tasks))
        for index in range(size):
            tasks.append(
                TaskRequest(
                    task_id=f"/{user}/job-{job}/{index}",
                    job_id=f"/{user}/job-{job}",
                    user=user,
                    resources=resources,
                    constraints=constraints,
                    band=band,
                    depth=1 + (job % 5 == 0),
                    root_submitted_at=submitted,
                    submitted_at=submitted,
                    group_by=group_by,
                    gang_size=size,
                )
            )
    return tasks


def make_running(workers: list[WorkerView]) -> list[RunningTask]:
    """One task filling each worker, in the top band, so nothing can be preempted."""
    return [
        RunningTask(
            f"/busy/{w.worker_id}/0", f"/busy/{w.worker_id}", w.worker_id, w.capacity, PriorityBand.PRODUCTION
        )
        for w in workers
    ]


def timed(repeat: int, fn) -> tuple[list[float], object]:
    times, result = [], None
    for _ in range(repeat):
        start = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - start)
    return times, result


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--workers", type=int, default=1000)
    parser.add_argument("--pending", type=int, default=10_000)
    add_common_args(parser, runs=5)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--check", action="store_true", help="exit 1 if placements/s is under the target")
    args = parser.parse_args()
    if args.tiny:
        args.workers, args.pending, args.runs = 50, 500, 1
    report = Report(
        "scheduler_kernel", args, {"workers": args.workers, "pending": args.pending, "runs": args.runs}
    )

    rng = random.Random(args.seed)
    workers = make_workers(args.workers, rng)
    pending = make_pending(args.pending, rng)
    shapes = len({(t.resources, tuple(c.describe() for c in t.constraints)) for t in pending})
    gangs = len({t.job_id for t in pending if t.group_by})
    report.note(f"mixed: {len(workers)} workers x {len(pending)} pending ({shapes} shapes, {gangs} gangs)")
    times, result = timed(args.runs, lambda: schedule(pending, workers))
    placed = len(result.assignments)
    rate = placed / statistics.median(times)
    codes: dict[str, int] = {}
    for reason in result.pending.values():
        codes[reason.code] = codes.get(reason.code, 0) + 1
    report.note(f"placed {placed}, pending {len(result.pending)} {codes}")
    report.figure(
        f"scheduling kernel, mixed case: one pass over {len(workers)} workers x {len(pending)} pending",
        [t * 1000 for t in times],
        "ms",
    )
    report.figure(
        "  placements/s", [placed / t for t in times], "placements/s", at_least(TARGET_PLACEMENTS_PER_S)
    )

    full = make_workers(args.workers, random.Random(args.seed), full=True)
    running = make_running(full)
    times, result = timed(args.runs, lambda: schedule(pending, full, running))
    if result.assignments or len(result.pending) != len(pending):
        raise SystemExit("nothing-fits case placed something")
    report.figure(
        f"scheduling kernel, nothing fits: {len(full)} full workers x {len(pending)} pending (a reason each)",
        [t * 1000 for t in times],
        "ms",
    )

    if args.check and rate < TARGET_PLACEMENTS_PER_S:
        print("FAIL: under target", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
