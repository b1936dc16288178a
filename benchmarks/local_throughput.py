"""End-to-end throughput and latency on an embedded local cluster.

Submits N `true` tasks (as one job with N replicas, and as single-task jobs for latency) to a local
cluster of 4 worker daemons and prints tasks/s and submit->RUNNING p50/p99.

    uv run python benchmarks/local_throughput.py [--tasks 1000] [--workers 4] [--latency-jobs 50]
"""

from __future__ import annotations

import argparse
import statistics
import time

from iris.client import Entrypoint, IrisClient, JobState, ResourceSpec


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--tasks", type=int, default=1000)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--worker-cpu", default="16", help="CPU each worker advertises")
    parser.add_argument("--task-cpu", default="0.1")
    parser.add_argument("--latency-jobs", type=int, default=50)
    args = parser.parse_args()

    with IrisClient.local(workers=args.workers, worker_cpu=args.worker_cpu, worker_memory="16GB") as client:
        res = ResourceSpec(cpu=args.task_cpu, memory="16MB")
        # Warm up: one job through every worker.
        client.submit(
            Entrypoint.from_command("true"), name="warmup", replicas=args.workers, resources=res
        ).wait(timeout=60)

        t0 = time.perf_counter()
        job = client.submit(
            Entrypoint.from_command("true"), name="throughput", replicas=args.tasks, resources=res
        )
        detail = job.wait(timeout=600, poll_s=0.05)
        elapsed = time.perf_counter() - t0
        assert detail.state is JobState.SUCCEEDED, detail.error
        print(
            f"throughput: {args.tasks} true tasks on {args.workers} workers in {elapsed:.2f}s = {args.tasks / elapsed:.0f} tasks/s"
        )

        latencies = []
        for i in range(args.latency_jobs):
            submitted = time.time()
            j = client.submit(Entrypoint.from_command("sleep", "0.2"), name=f"latency-{i}", resources=res)
            d = j.wait(timeout=60, poll_s=0.01)
            started = d.tasks[0].attempts[-1].started_at
            assert d.state is JobState.SUCCEEDED and started is not None
            latencies.append((started - submitted) * 1000)
        print(
            f"submit->RUNNING over {len(latencies)} jobs: p50 {percentile(latencies, 0.5):.1f} ms,"
            f" p99 {percentile(latencies, 0.99):.1f} ms, mean {statistics.mean(latencies):.1f} ms"
        )


if __name__ == "__main__":
    main()
