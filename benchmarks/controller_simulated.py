"""The controller alone at scale, against simulated workers that finish every task instantly.

Measures (a) tasks/s from PENDING to SUCCEEDED with 1,000 simulated workers and 100,000 tasks
(target >= 10,000 tasks/s), (b) the duration of a full reconcile round over 1,000 workers (target
<= 250 ms), (c) control rounds for a minute with 200,000 tasks pending and none placeable (target <= 20 ms),
and (d) a restart with 100,000 stored tasks: time to the first new dispatch and the RSS.

    uv run python benchmarks/controller_simulated.py [--workers 1000] [--tasks 100000] [--runs 3]
"""

from __future__ import annotations

import argparse
import os
import resource
import tempfile
import time
from pathlib import Path

from report import Report, add_common_args, at_least, at_most

from iris.cluster.controller.backend import BackendDescriptor, BackendKind
from iris.cluster.controller.controller import Controller, create_controller
from iris.rpc.models import Entrypoint, JobSpec, RegisterRequest, ResourceSpec
from iris.testing.simulated_workers import SimulatedFleetProcess as SimulatedFleet

DESCRIPTOR = BackendDescriptor(backend_id="bench", kind=BackendKind.WORKER)


def register(controller: Controller, fleet: SimulatedFleet, cpu: int = 32) -> None:
    for i in range(fleet.count):
        controller.register_worker(
            RegisterRequest(
                worker_id=fleet.worker_id(i),
                address=fleet.address(i),
                capacity=ResourceSpec(cpu=cpu, memory="128GB"),
            )
        )


def spec(name: str, replicas: int, cpu: int = 1) -> JobSpec:
    return JobSpec(
        name=name,
        entrypoint=Entrypoint.from_command("true"),
        replicas=replicas,
        resources=ResourceSpec(cpu=cpu, memory="64MB"),
        wait_for_capacity=True,  # the unplaceable backlogs are meant to wait
        user="bench",
    )


def wait_all_done(controller: Controller, total: int, timeout: float = 600) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with controller.db.read() as cur:
            done = cur.execute("SELECT count(*) FROM tasks WHERE state = 'SUCCEEDED'").fetchone()[0]
        if done >= total:
            return
        time.sleep(0.05)
    raise TimeoutError(f"only {done} of {total} tasks finished")


def throughput(workers: int, tasks: int, backlog: int = 0) -> float:
    """Tasks/s PENDING->SUCCEEDED for ``tasks`` placeable tasks, with ``backlog`` tasks pending
    that fit no worker (asking for more CPU than any has) queued before them."""
    fleet = SimulatedFleet(workers).start()
    with tempfile.TemporaryDirectory() as d:
        controller = create_controller(DESCRIPTOR, state_dir=d, tick_interval_s=1.0)
        register(controller, fleet)
        for j in range(0, backlog, 10_000):
            controller.submit(spec(f"backlog-{j}", min(10_000, backlog - j), cpu=64), user="bench")
        controller.start()
        # The first round after a start reads the whole backlog once (nothing about it is known
        # yet); the figure is the steady state after it.
        deadline = time.monotonic() + 600
        while backlog and len(controller.last_unplaced) < backlog and time.monotonic() < deadline:
            time.sleep(0.05)
        jobs = 10
        t0 = time.perf_counter()
        for j in range(jobs):
            controller.submit(spec(f"tp-{j}", tasks // jobs), user="bench")
        wait_all_done(controller, tasks // jobs * jobs)
        elapsed = time.perf_counter() - t0
        controller.stop()
    fleet.stop()
    return tasks / elapsed


def reconcile_round(workers: int, rounds: int) -> list[float]:
    fleet = SimulatedFleet(workers).start()
    controller = create_controller(DESCRIPTOR, tick_interval_s=3600)
    register(controller, fleet)
    controller.submit(spec("round", workers * 2), user="bench")
    controller.run_round(full=True)  # dispatch
    times = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        controller.run_round(full=True)
        times.append((time.perf_counter() - t0) * 1000)
    controller.stop()
    fleet.stop()
    return times


def unplaceable_round(pending: int, window_s: float) -> tuple[list[float], list[float]]:
    """Control rounds for ``window_s`` seconds, one every 20 ms, with ``pending`` tasks that ask for
    more CPU than any worker has: (every round's ms, the ms of those that re-read the whole queue).

    After the first pass parks the backlog, a round reads only new work and room that grew; the
    queue's safety net still re-reads everything now and then (scheduler/queue.py): those rounds
    are the second list, and how often they come is what the window shows."""
    fleet = SimulatedFleet(4).start()
    with tempfile.TemporaryDirectory() as d:
        controller = create_controller(DESCRIPTOR, state_dir=d, tick_interval_s=3600)
        register(controller, fleet, cpu=8)
        per_job = min(pending, 10_000)
        for j in range(pending // per_job):
            controller.submit(spec(f"big-{j}", per_job, cpu=16), user="bench")
        controller.run_round(full=True)  # the first pass writes every task's pending reason
        rounds, rereads = [], []
        end = time.monotonic() + window_s
        while time.monotonic() < end:
            t0 = time.perf_counter()
            controller.run_round(full=False)
            ms = (time.perf_counter() - t0) * 1000
            rounds.append(ms)
            if controller.round_stats["last_pass_tasks"] >= pending // 2:
                rereads.append(ms)
            time.sleep(0.02)
        controller.stop()
    fleet.stop()
    return rounds, rereads


def restart(stored: int) -> tuple[float, float]:
    """(ms to the first new dispatch after a restart over ``stored`` finished tasks, peak RSS MB)."""
    with tempfile.TemporaryDirectory() as d:
        controller = create_controller(DESCRIPTOR, state_dir=d)
        per_job = min(stored, 10_000)
        for j in range(stored // per_job):
            controller.submit(spec(f"old-{j}", per_job), user="bench")
        with controller.db.transaction() as cur:  # they all finished long ago
            cur.execute("UPDATE tasks SET state = 'SUCCEEDED', finished_at = 1")
            cur.execute("UPDATE jobs SET state = 'SUCCEEDED', finished_at = 1")
        controller.db.close()
        fleet = SimulatedFleet(4).start()
        t0 = time.perf_counter()
        restarted = create_controller(DESCRIPTOR, state_dir=Path(d))
        register(restarted, fleet)
        restarted.start()
        restarted.submit(spec("new", 1), user="bench")
        while True:
            with restarted.db.read() as cur:
                row = cur.execute("SELECT state FROM tasks WHERE job_id = '/bench/new'").fetchone()
            if row and row[0] != "PENDING":
                break
            time.sleep(0.005)
        first = time.perf_counter() - t0
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        restarted.stop()
        fleet.stop()
    return first * 1000, rss / 1024


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add_common_args(parser)
    parser.add_argument("--workers", type=int, default=1000)
    parser.add_argument("--tasks", type=int, default=100_000)
    parser.add_argument("--round-workers", type=int, default=1000)
    parser.add_argument("--pending", type=int, default=200_000)
    parser.add_argument("--stored", type=int, default=100_000)
    args = parser.parse_args()
    if args.tiny:
        args.workers, args.tasks, args.round_workers, args.pending, args.stored, args.runs = (
            10, 1000, 10, 2000, 2000, 1,
        )  # fmt: skip
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    report = Report(
        "controller_simulated",
        args,
        {
            "workers": args.workers,
            "tasks": args.tasks,
            "round_workers": args.round_workers,
            "pending": args.pending,
            "stored": args.stored,
            "runs": args.runs,
        },
    )
    rates = [throughput(args.workers, args.tasks) for _ in range(args.runs)]
    report.figure(
        f"controller, {args.workers} simulated workers, {args.tasks} tasks PENDING->SUCCEEDED",
        rates,
        "tasks/s",
        at_least(10_000),
    )
    rounds = reconcile_round(args.round_workers, max(5, args.runs))
    report.figure(f"full reconcile round over {args.round_workers} workers", rounds, "ms", at_most(250))
    window = 5.0 if args.tiny else 60.0
    rounds, rereads = unplaceable_round(args.pending, window)
    report.figure(
        f"control round with {args.pending} tasks pending, none placeable ({window:.0f} s of rounds)",
        rounds,
        "ms",
        at_most(20),
    )
    if rereads:
        report.figure(
            f"  rounds that re-read the whole queue (the safety net): {len(rereads)} in {window:.0f} s",
            rereads,
            "ms",
        )
    first, rss = restart(args.stored)
    report.figure(f"restart with {args.stored} stored tasks: first new dispatch", [first], "ms")
    report.figure("  peak RSS of the benchmark process", [rss], "MB")


if __name__ == "__main__":
    main()
