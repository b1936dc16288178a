"""Iris beside Ray: 1,000 `true` tasks, interleaved rounds in one run, and the ratio.

Iris: one 1,000-replica job of `true` on an embedded local cluster of 4 workers. Ray (only when
``--ray-python`` names the python of a separate virtual environment with ray installed; ray is
never a dependency of this project): an in-process head with ``num_cpus=2`` running 1,000 tasks
that each fork `true`. Each round starts the system, warms it up, times the 1,000 tasks and stops
it, so the two never run at the same time; rounds alternate Iris, Ray, Iris, Ray, ...

    uv venv /tmp/rayenv && uv pip install --python /tmp/rayenv ray
    uv run python benchmarks/vs_ray.py --ray-python /tmp/rayenv/bin/python [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from local_throughput import TRUE, run_tasks_job
from report import Report, add_common_args, at_least

from iris.client import IrisClient, ResourceSpec

RAY_ROUND = """
import json, subprocess, sys, time
import ray

ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)

@ray.remote
def run_true():
    subprocess.run(["true"], check=True)

n = int(sys.argv[1])
ray.get([run_true.remote() for _ in range(min(n, 50))])  # warm up the worker pool
t0 = time.perf_counter()
ray.get([run_true.remote() for _ in range(n)])
elapsed = time.perf_counter() - t0
print(json.dumps({"seconds": elapsed, "version": ray.__version__}))
ray.shutdown()
"""


def iris_round(tasks: int, workers: int, index: int, state_dir: Path) -> float:
    res = ResourceSpec(cpu="0.1", memory="16MB")
    cluster = {"worker_cpu": "16", "worker_memory": "16GB", "state_dir": state_dir}
    with IrisClient.local(workers=workers, **cluster) as client:
        client.submit(TRUE, name="warmup", replicas=workers * 4, resources=res).wait(timeout=60)
        return tasks / run_tasks_job(client, f"vs-ray-{index}", tasks, res)


def ray_round(ray_python: Path, tasks: int, tries: int = 5) -> tuple[float, str]:
    """One Ray round in its own process; retried, since on a loaded machine Ray's raylet can miss
    its fixed 30 s start-up deadline. Only the 1,000 tasks are timed, never Ray's start."""
    # Started under `uv run`, Ray would start its workers through `uv run` in our project (its
    # uv hook): they then fail to start, or set up an environment that is not Ray's venv.
    env = {
        **os.environ,
        "RAY_USAGE_STATS_ENABLED": "0",
        "RAY_AUTH_MODE": "disabled",
        "RAY_ENABLE_UV_RUN_RUNTIME_ENV": "0",
    }
    for _ in range(tries):
        done = subprocess.run(
            [str(ray_python), "-c", RAY_ROUND, str(tasks)],
            capture_output=True,
            text=True,
            timeout=900,
            env=env,
        )
        if done.returncode == 0:
            break
        print(f"the Ray round failed, retrying: {done.stderr.strip().splitlines()[-1:]}", file=sys.stderr)
    else:
        raise SystemExit("the Ray round failed every time")
    result = json.loads(done.stdout.strip().splitlines()[-1])
    return tasks / result["seconds"], result["version"]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add_common_args(parser)
    parser.add_argument("--tasks", type=int, default=1000)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--ray-python", type=Path, help="python of a virtual environment with ray")
    args = parser.parse_args()
    if args.tiny:
        args.tasks, args.runs = 20, 1
    report = Report(
        "vs_ray",
        args,
        {"tasks": args.tasks, "iris_workers": args.workers, "ray_num_cpus": 2, "rounds": args.runs},
    )
    ours, theirs = [], []
    version = ""
    # Every round's files stay until the end, as Ray's session directories do: deleting a round's
    # ~10,000 files right before the next round made its file creations pay for them (a
    # journal-less ext4 skips recently freed inodes, reading each; docs/performance.md).
    kept = tempfile.TemporaryDirectory(prefix="iris-vs-ray-")
    for index in range(args.runs):
        ours.append(iris_round(args.tasks, args.workers, index, Path(kept.name) / f"round-{index}"))
        report.note(f"round {index}: iris {ours[-1]:.0f} tasks/s")
        if args.ray_python is not None:
            rate, version = ray_round(args.ray_python, args.tasks)
            theirs.append(rate)
            report.note(f"round {index}: ray {rate:.0f} tasks/s")
    report.figure(
        f"iris: {args.tasks} true tasks as one job, {args.workers} workers", ours, "tasks/s", at_least(1200)
    )
    if theirs:
        report.figure(f"ray {version}: {args.tasks} tasks that each fork true, num_cpus=2", theirs, "tasks/s")
        ratios = [a / b for a, b in zip(ours, theirs, strict=True)]
        report.figure("iris / ray, per round", ratios, "x", at_least(1.0))
    else:
        print("(no --ray-python given: Ray not measured)", file=sys.stderr)
    kept.cleanup()


if __name__ == "__main__":
    main()
