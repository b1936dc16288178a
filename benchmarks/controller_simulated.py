"""The controller alone at scale, against simulated workers that finish every task instantly.

Measures (a) tasks/s from PENDING to SUCCEEDED with 100 simulated workers, (b) the duration of a
full reconcile round over 1,000 workers, and (c) a restart with 100,000 stored tasks: time to the
first new dispatch and the controller's RSS.

    uv run python benchmarks/controller_simulated.py [--workers 100] [--tasks 10000] [--round-workers 1000]
"""

from __future__ import annotations

import argparse
import resource
import statistics
import tempfile
import time
from pathlib import Path

from iris.cluster.controller.backend import BackendDescriptor, BackendKind
from iris.cluster.controller.controller import Controller, create_controller
from iris.rpc.models import Entrypoint, JobSpec, RegisterRequest, ResourceSpec
from iris.testing.simulated_workers import SimulatedFleetProcess as SimulatedFleet

DESCRIPTOR = BackendDescriptor(backend_id="bench", kind=BackendKind.WORKER)


def register(controller: Controller, fleet: SimulatedFleet) -> None:  # type: ignore[valid-type]
    for i in range(fleet.count):
        controller.register_worker(
            RegisterRequest(
                worker_id=fleet.worker_id(i),
                address=fleet.address(i),
                capacity=ResourceSpec(cpu=32, memory="128GB"),
            )
        )


def spec(name: str, replicas: int) -> JobSpec:
    return JobSpec(
        name=name,
        entrypoint=Entrypoint.from_command("true"),
        replicas=replicas,
        resources=ResourceSpec(cpu=1, memory="64MB"),
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


def throughput(workers: int, tasks: int) -> None:
    fleet = SimulatedFleet(workers).start()
    with tempfile.TemporaryDirectory() as d:
        controller = create_controller(DESCRIPTOR, state_dir=d, tick_interval_s=1.0)
        register(controller, fleet)
        controller.start()
        jobs = 10
        t0 = time.perf_counter()
        for j in range(jobs):
            controller.submit(spec(f"tp-{j}", tasks // jobs), user="bench")
        wait_all_done(controller, tasks)
        elapsed = time.perf_counter() - t0
        controller.stop()
    fleet.stop()
    print(
        f"controller throughput: {tasks} tasks PENDING->SUCCEEDED on {workers} simulated workers in {elapsed:.2f}s = {tasks / elapsed:.0f} tasks/s"
    )


def reconcile_round(workers: int) -> None:
    fleet = SimulatedFleet(workers).start()
    controller = create_controller(DESCRIPTOR, tick_interval_s=3600)
    register(controller, fleet)
    controller.submit(spec("round", workers * 2), user="bench")
    controller.run_round(full=True)  # dispatch
    times = []
    for _ in range(5):
        t0 = time.perf_counter()
        controller.run_round(full=True)
        times.append((time.perf_counter() - t0) * 1000)
    controller.stop()
    fleet.stop()
    print(
        f"full reconcile round over {workers} workers: median {statistics.median(times):.0f} ms, max {max(times):.0f} ms"
    )


def restart(stored: int) -> None:
    with tempfile.TemporaryDirectory() as d:
        controller = create_controller(DESCRIPTOR, state_dir=d)
        for j in range(stored // 10_000):
            controller.submit(spec(f"old-{j}", 10_000), user="bench")
        with controller.db.transaction() as cur:  # they all finished long ago
            cur.execute("UPDATE tasks SET state = 'SUCCEEDED', finished_at = 1")
            cur.execute("UPDATE jobs SET state = 'SUCCEEDED', finished_at = 1")
        controller.db.close()
        fleet = SimulatedFleet(4).start()
        rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
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
    print(
        f"restart with {stored} stored tasks: first new dispatch after {first * 1000:.0f} ms; peak RSS {rss / 1024:.0f} MB (before restart {rss_before / 1024:.0f} MB)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--workers", type=int, default=100)
    parser.add_argument("--tasks", type=int, default=10_000)
    parser.add_argument("--round-workers", type=int, default=1000)
    parser.add_argument("--stored", type=int, default=100_000)
    args = parser.parse_args()
    throughput(args.workers, args.tasks)
    reconcile_round(args.round_workers)
    restart(args.stored)


if __name__ == "__main__":
    main()
