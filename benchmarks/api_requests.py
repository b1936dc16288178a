"""What one API request costs: the round trip and the controller's CPU per request.

Every call a client, the dashboard or a worker makes goes through the same HTTP stack (uvicorn,
the guards, FastAPI), so its cost per request bounds how many jobs a second one controller can
take one at a time. Measured on a local cluster with one worker, one request after another:

- a read: ``GET /api/v1/cluster`` (the cluster's counts, what ``iris cluster status`` shows);
- a submit: ``POST /api/v1/jobs`` of a single-task `true` job, answered once it is stored (the
  job then runs on the worker: its dispatch and reconciles are in the controller's CPU too).

    uv run python benchmarks/api_requests.py [--requests 2000] [--runs 3]
"""

from __future__ import annotations

import argparse
import time

import psutil
from report import Report, add_common_args, percentile

from iris.client import Entrypoint, IrisClient, ResourceSpec

TRUE = Entrypoint.from_command("true")


def cpu_seconds(pid: int) -> float:
    times = psutil.Process(pid).cpu_times()
    return times.user + times.system


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add_common_args(parser)
    parser.add_argument("--requests", type=int, default=2000)
    args = parser.parse_args()
    if args.tiny:
        args.requests, args.runs = 20, 1
    report = Report("api_requests", args, {"requests": args.requests, "runs": args.runs, "workers": 1})
    res = ResourceSpec(cpu="0.1", memory="16MB")
    with IrisClient.local(workers=1, worker_cpu="16", worker_memory="16GB") as client:
        cluster = client.cluster
        if cluster is None or cluster.controller is None:
            raise SystemExit("needs a local cluster")
        pid = cluster.controller.proc.pid
        client.submit(TRUE, name="warmup", replicas=4, resources=res).wait(timeout=60)
        figures: dict[str, tuple[list[float], list[float]]] = {"read": ([], []), "submit": ([], [])}
        for run in range(args.runs):
            for case, (latencies, cpus) in figures.items():
                specs = [
                    client.build_spec(TRUE, name=f"req-{run}-{i}", resources=res)
                    for i in range(args.requests)
                ]
                took: list[float] = []
                before = cpu_seconds(pid)
                for spec in specs:
                    t0 = time.perf_counter()
                    if case == "read":
                        client.cluster_status()
                    else:
                        client.submit_spec(spec)
                    took.append((time.perf_counter() - t0) * 1000)
                cpus.append((cpu_seconds(pid) - before) / args.requests * 1000)
                latencies.append(percentile(took, 0.5))
        report.figure("GET /api/v1/cluster, round trip p50", figures["read"][0], "ms")
        report.figure("  controller CPU per read", figures["read"][1], "ms")
        report.figure("POST /api/v1/jobs (one at a time), round trip p50", figures["submit"][0], "ms")
        report.figure("  controller CPU per submitted job, its run included", figures["submit"][1], "ms")


if __name__ == "__main__":
    main()
