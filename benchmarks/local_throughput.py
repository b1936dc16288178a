"""End-to-end throughput and latency on an embedded local cluster (real controller and workers).

Cases (``--cases``, default all):
- tasks: N `true` tasks as one N-replica job on 4 workers (target >= 1,200 tasks/s).
- jobs: N single-task `true` jobs submitted back to back through the SDK, then run to the end
  (target >= 600 jobs/s end to end); the submissions alone are reported too.
- batch: the same N jobs in one ``client.submit_many`` call (target >= 2,000 jobs/s submitted).
- latency: submit->RUNNING for sequential single-task jobs on an idle cluster
  (targets p50 <= 10 ms, p99 <= 40 ms).
- loaded: submit->RUNNING for a job that fits a free slot while 10,000 tasks wait on a full
  cluster (target p99 <= 50 ms).

Each figure is the median over ``--runs`` repetitions on the same cluster; controller and worker
CPU per task are reported beside the throughput.

    uv run python benchmarks/local_throughput.py [--runs 3] [--tasks 1000] [--cases tasks,jobs]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import psutil
from report import Report, add_common_args, at_least, at_most, percentile

from iris.client import Entrypoint, IrisClient, JobState, ResourceSpec
from iris.rpc.models import JobSpec

CASES = ("tasks", "jobs", "batch", "latency", "loaded")
TRUE = Entrypoint.from_command("true")


def cpu_seconds(pids: list[int]) -> float:
    total = 0.0
    for pid in pids:
        times = psutil.Process(pid).cpu_times()
        total += times.user + times.system
    return total


def wait_idle(client: IrisClient, timeout: float = 600) -> None:
    """Until no job is PENDING or RUNNING."""
    deadline = time.monotonic() + timeout
    delay = 0.005
    while client.list_jobs(state=["PENDING", "RUNNING"], limit=1).total:
        if time.monotonic() > deadline:
            raise TimeoutError("jobs still running")
        time.sleep(delay)
        delay = min(0.05, delay * 1.5)


def start_latency(client: IrisClient, spec: Callable[[int], JobSpec], count: int) -> list[float]:
    """Milliseconds from submit to the worker's start of the process, one job after another."""
    latencies = []
    for i in range(count):
        submitted = time.time()
        job = client.submit_spec(spec(i))
        detail = job.wait(timeout=120, poll_s=0.005)
        started = detail.tasks[0].attempts[-1].started_at
        if detail.state is not JobState.SUCCEEDED or started is None:
            raise RuntimeError(f"latency job ended {detail.state}: {detail.error}")
        latencies.append((started - submitted) * 1000)
    return latencies


def run_tasks_job(
    client: IrisClient, name: str, tasks: int, res: ResourceSpec, *, workspace: bool = False
) -> float:
    """Seconds from submitting one ``tasks``-replica job of `true` to its end. ``workspace``: ship
    the current directory with it, as ``iris job run`` does (each attempt then starts in its own
    copy of it, in the project's environment); without it, a bare command, as the figures before
    workspaces were shipped by default measured."""
    t0 = time.perf_counter()
    job = client.submit(TRUE, name=name, replicas=tasks, resources=res, workspace=workspace)
    detail = job.wait(timeout=600, poll_s=0.02)
    elapsed = time.perf_counter() - t0
    if detail.state is not JobState.SUCCEEDED:
        raise RuntimeError(f"throughput job ended {detail.state}: {detail.error}")
    return elapsed


class Pids:
    def __init__(self, client: IrisClient) -> None:
        cluster = client.cluster
        if cluster is None or cluster.controller is None:
            raise RuntimeError("needs a local cluster")
        self.controller = [cluster.controller.proc.pid]
        self.workers = [w.proc.pid for w in cluster.workers]


def idle_cluster_cases(args: argparse.Namespace, report: Report) -> None:
    res = ResourceSpec(cpu=args.task_cpu, memory="16MB")
    with IrisClient.local(workers=args.workers, worker_cpu=args.worker_cpu, worker_memory="16GB") as client:
        pids = Pids(client)
        client.submit(TRUE, name="warmup", replicas=args.workers * 4, resources=res).wait(timeout=60)

        def single(name: str) -> Callable[[int], JobSpec]:
            return lambda i: client.build_spec(TRUE, name=f"{name}-{i}", resources=res)

        if "tasks" in args.cases:
            rates, controller_cpu, worker_cpu = [], [], []
            for run in range(args.runs):
                c0, w0 = cpu_seconds(pids.controller), cpu_seconds(pids.workers)
                elapsed = run_tasks_job(client, f"tasks-{run}", args.tasks, res)
                rates.append(args.tasks / elapsed)
                controller_cpu.append((cpu_seconds(pids.controller) - c0) / args.tasks * 1000)
                worker_cpu.append((cpu_seconds(pids.workers) - w0) / args.tasks * 1000)
            name = f"{args.tasks} true tasks as one job, {args.workers} workers"
            report.figure(name, rates, "tasks/s", at_least(1200))
            report.figure("  controller CPU per task", controller_cpu, "ms")
            report.figure("  worker daemons' CPU per task (without the task itself)", worker_cpu, "ms")

        if "jobs" in args.cases:
            e2e, submits = [], []
            for run in range(args.runs):
                make = single(f"jobs{run}")
                t0 = time.perf_counter()
                for i in range(args.jobs):
                    client.submit_spec(make(i))
                t1 = time.perf_counter()
                wait_idle(client)
                t2 = time.perf_counter()
                submits.append(args.jobs / (t1 - t0))
                e2e.append(args.jobs / (t2 - t0))
            name = f"{args.jobs} single-task jobs submitted back to back (SDK) and run"
            report.figure(name, e2e, "jobs/s", at_least(600))
            report.figure("  their submissions alone", submits, "jobs/s")

        if "batch" in args.cases:
            submitted, e2e = [], []
            for run in range(args.runs):
                make = single(f"batch{run}")
                specs = [make(i) for i in range(args.jobs)]
                t0 = time.perf_counter()
                client.submit_many(specs)
                t1 = time.perf_counter()
                wait_idle(client)
                t2 = time.perf_counter()
                submitted.append(args.jobs / (t1 - t0))
                e2e.append(args.jobs / (t2 - t0))
            report.figure(f"{args.jobs} jobs in one submit_many call", submitted, "jobs/s", at_least(2000))
            report.figure("  and run to the end", e2e, "jobs/s")

        if "latency" in args.cases:
            p50s, p99s = [], []
            for run in range(args.runs):
                lat = start_latency(client, single(f"lat{run}"), args.latency_jobs)
                p50s.append(percentile(lat, 0.5))
                p99s.append(percentile(lat, 0.99))
            name = f"submit->RUNNING, idle cluster, {args.latency_jobs} sequential jobs"
            report.figure(f"{name}, p50", p50s, "ms", at_most(10))
            report.figure(f"{name}, p99", p99s, "ms", at_most(40))


def loaded_cluster_case(args: argparse.Namespace, report: Report) -> None:
    """Every worker keeps 1 of its 4 CPUs free; the backlog asks for 2 CPUs a task, so none places."""
    with IrisClient.local(workers=args.workers, worker_cpu="4", worker_memory="16GB") as client:
        sleeper = Entrypoint.from_command("sleep", "3600")
        client.submit(
            sleeper, name="fill", replicas=args.workers, resources=ResourceSpec(cpu=3, memory="16MB")
        )
        per_job = max(1, args.backlog // 10)
        specs = [
            client.build_spec(
                sleeper, name=f"backlog-{j}", replicas=per_job, resources=ResourceSpec(cpu=2, memory="16MB")
            )
            for j in range(args.backlog // per_job)
        ]
        backlog = client.submit_many(specs)
        deadline = time.monotonic() + 120
        while client.cluster_status().tasks_by_state.get("RUNNING", 0) < args.workers:
            if time.monotonic() > deadline:
                raise TimeoutError("the fill job did not start")
            time.sleep(0.05)
        res = ResourceSpec(cpu="0.5", memory="16MB")
        p99s = []
        for run in range(args.runs):
            lat = start_latency(
                client,
                lambda i, run=run: client.build_spec(TRUE, name=f"fits-{run}-{i}", resources=res),
                args.latency_jobs,
            )
            p99s.append(percentile(lat, 0.99))
            report.note(f"run {run}: p50 {percentile(lat, 0.5):.1f} ms, p99 {p99s[-1]:.1f} ms")
        name = (
            f"submit->RUNNING with {per_job * len(backlog)} tasks pending on a full cluster,"
            f" a job that fits, {args.latency_jobs} jobs, p99"
        )
        report.figure(name, p99s, "ms", at_most(50))
        for job in backlog:
            job.kill()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add_common_args(parser)
    parser.add_argument("--tasks", type=int, default=1000)
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--worker-cpu", default="16", help="CPU each worker advertises")
    parser.add_argument("--task-cpu", default="0.1")
    parser.add_argument("--latency-jobs", type=int, default=200)
    parser.add_argument("--backlog", type=int, default=10_000, help="pending tasks in the loaded case")
    parser.add_argument("--cases", default=",".join(CASES), help=f"comma-separated subset of {CASES}")
    args = parser.parse_args()
    args.cases = set(args.cases.split(","))
    if args.tiny:
        args.tasks, args.jobs, args.latency_jobs, args.backlog, args.runs = 20, 20, 5, 100, 1
    sizes = {
        "workers": args.workers,
        "tasks": args.tasks,
        "jobs": args.jobs,
        "latency_jobs": args.latency_jobs,
        "backlog": args.backlog,
        "runs": args.runs,
    }
    report = Report("local_throughput", args, sizes)
    idle_cluster_cases(args, report)
    if "loaded" in args.cases:
        loaded_cluster_case(args, report)


if __name__ == "__main__":
    main()
