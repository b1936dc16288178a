"""Container task cost: Iris jobs in an image against bare ``docker run``, interleaved in one run.

Cases, all with ``iris-test/busybox:1`` running ``true`` on the test engine
(``scripts/container-engine``; started here if none runs, stopped at the end if started here):
- bare: ``docker run --rm --network host IMAGE true``, ``--parallel`` at a time (the worker's
  concurrency), N times: wall time / N is the bare per-task cost;
- jobs: N one-task jobs submitted at once (``submit_many``), from submission to the last one's end
  (the client waits on the last job, then counts unfinished ones: no request per job meanwhile);
- tasks: one N-task job, from submission to its end.

One local cluster (one worker with ``--parallel`` cpu slots, each task asking for one) serves every
round. The cases are interleaved so that the machine's load (shared with others) hits bare and
Iris alike: ``bare, jobs, tasks, bare, tasks, jobs, bare, ...`` (the order of the two Iris cases
alternates), and each Iris measurement is divided by the mean of the two bare measurements either
side of it. Figures: the median per-task cost of each case, the median of those ratios (target
<= 1.25: Iris adds at most 25% to the bare per-task cost) and the container tasks started per
second (target >= 5).

    uv run python benchmarks/containers.py [--tasks 200] [--parallel 4] [--runs 3] [--json PATH]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from itertools import pairwise
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from report import Report, add_common_args, at_least, at_most  # noqa: E402

from iris.client import Entrypoint, IrisClient, ResourceSpec  # noqa: E402
from iris.client.local_cluster import LocalCluster  # noqa: E402
from iris.testing import container_engine as engines  # noqa: E402
from iris.testing.images import BUSYBOX_IMAGE  # noqa: E402

TRUE = Entrypoint.from_command("true")
RATIO_TARGET = 1.25
RATE_TARGET = 5.0


def bare(count: int, parallel: int, env: dict[str, str]) -> float:
    """Seconds for ``count`` bare ``docker run --rm --network host IMAGE true``, ``parallel`` at a time."""
    cli = engines.docker_cli()

    def one(_: int) -> None:
        subprocess.run(
            [cli, "run", "--rm", "--network", "host", BUSYBOX_IMAGE, "true"],
            env=env,
            check=True,
            capture_output=True,
        )

    started = time.monotonic()
    with ThreadPoolExecutor(parallel) as pool:
        list(pool.map(one, range(count)))
    return time.monotonic() - started


def wait_done(client: IrisClient, job_ids: list[str], name: str, timeout: float = 1800) -> None:
    """Until every job whose name contains ``name`` has ended (all of ``job_ids``), then check they
    all succeeded. The client holds one request on the last job while they run and then counts the
    unfinished ones (they run in submission order): it does not ask about each job in turn, which
    would load the controller with two requests per job while the tasks run."""
    deadline = time.monotonic() + timeout
    client.job(job_ids[-1]).wait(timeout=timeout)
    while client.list_jobs(state=["PENDING", "RUNNING"], name=name, limit=1).total:
        if time.monotonic() > deadline:
            raise SystemExit(f"jobs {name}* still running after {timeout:g}s")
        time.sleep(0.02)


def check_succeeded(client: IrisClient, count: int, name: str) -> None:
    succeeded = client.list_jobs(state=["SUCCEEDED"], name=name, limit=1).total
    if succeeded != count:
        raise SystemExit(f"{count - succeeded} of the {count} jobs {name}* did not succeed")


def one_task_jobs(client: IrisClient, count: int, tag: str, resources: ResourceSpec) -> float:
    specs = [
        client.build_spec(TRUE, name=f"c{tag}x{i}", image=BUSYBOX_IMAGE, resources=resources)
        for i in range(count)
    ]
    started = time.monotonic()
    jobs = client.submit_many(specs)
    wait_done(client, [j.job_id for j in jobs], f"c{tag}x")
    seconds = time.monotonic() - started
    check_succeeded(client, count, f"c{tag}x")
    return seconds


def many_task_job(client: IrisClient, count: int, tag: str, resources: ResourceSpec) -> float:
    started = time.monotonic()
    job = client.submit(
        TRUE, name=f"many{tag}y", image=BUSYBOX_IMAGE, resources=resources, replicas=count, workspace=False
    )
    wait_done(client, [job.job_id], f"many{tag}y")
    seconds = time.monotonic() - started
    check_succeeded(client, 1, f"many{tag}y")
    return seconds


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=200, help="tasks per case and round")
    parser.add_argument("--parallel", type=int, default=4, help="tasks at a time (worker cpu slots)")
    add_common_args(parser, runs=3)
    args = parser.parse_args()
    if args.tiny:
        args.tasks, args.runs = 8, 1
    n, parallel = args.tasks, args.parallel
    report = Report("containers", args, {"tasks": n, "parallel": parallel, "rounds": args.runs})
    engine = engines.acquire()
    bares: list[float] = []  # seconds, one before the first round and one after each
    iris: dict[str, list[float]] = {"jobs": [], "tasks": []}  # seconds, one per round
    try:
        engines.load_images(engine, (BUSYBOX_IMAGE,))
        env = {**os.environ, **engine.env()}
        os.environ.update(engine.env())
        os.environ["IRIS_CONTAINER_CLI"] = engines.docker_cli()
        resources = ResourceSpec(cpu=1, memory="128MB")
        with LocalCluster(workers=1, worker_cpu=str(parallel), worker_memory="8GB") as cluster:
            with IrisClient(cluster.url) as client:
                bare(2 * parallel, parallel, env)  # warm the engine
                many_task_job(client, parallel, "-warm", resources)  # and the cluster (image seen)
                cases: dict[str, Callable[[IrisClient, int, str, ResourceSpec], float]] = {
                    "jobs": one_task_jobs,
                    "tasks": many_task_job,
                }
                bares.append(bare(n, parallel, env))
                for number in range(args.runs):
                    order = ["jobs", "tasks"] if number % 2 == 0 else ["tasks", "jobs"]
                    for case in order:
                        iris[case].append(cases[case](client, n, str(number), resources))
                    bares.append(bare(n, parallel, env))
                    report.note(
                        f"round {number + 1}: bare {bares[-2] / n * 1000:.0f} ms, one-task jobs "
                        f"{iris['jobs'][-1] / n * 1000:.0f} ms, one {n}-task job "
                        f"{iris['tasks'][-1] / n * 1000:.0f} ms, bare {bares[-1] / n * 1000:.0f} ms a task"
                    )
    finally:
        engines.release(engine)
    # Each Iris measurement against the bare cost around it (the rounds' bare runs either side).
    beside = [(before + after) / 2 for before, after in pairwise(bares)]
    report.figure(
        f"bare docker run --rm --network host true, {parallel} at a time",
        [b / n * 1000 for b in bares],
        "ms/task",
    )
    names = {"jobs": f"{n} one-task jobs", "tasks": f"one {n}-task job"}
    for case, name in names.items():
        report.figure(name, [s / n * 1000 for s in iris[case]], "ms/task")
    for case, name in names.items():
        ratios = [s / b for s, b in zip(iris[case], beside, strict=True)]
        report.figure(f"{name} / bare, per task", ratios, "x", at_most(RATIO_TARGET))
    for case, name in names.items():
        report.figure(
            f"{name}: container tasks", [n / s for s in iris[case]], "tasks/s", at_least(RATE_TARGET)
        )
    overheads = [(s / b - 1) * 100 for case in names for s, b in zip(iris[case], beside, strict=True)]
    report.note(
        f"Iris adds {statistics.median(overheads):+.0f}% (median over both cases and every round) "
        f"to the bare per-task cost; goal <= +{(RATIO_TARGET - 1) * 100:.0f}%"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
