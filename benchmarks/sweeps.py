"""How cost grows: sweeps of pending tasks, workers and log volume, plotted per task.

- pending: with N tasks (1k -> 100k) pending that fit no worker, the cost per task of running
  1,000 more through the real controller to 100 simulated workers, and the control round with
  N tasks pending and none placeable.
- workers: 10 -> 1,000 simulated workers running 5,000 tasks; the cost per task, and the full
  reconcile round over that many workers.
- logs: real worker daemons running tasks that each write K lines (0 -> 100,000); wall time per
  task on 4 workers.

Each sweep prints its points in the shared report format and draws a PNG in ``--plots-dir``
(default benchmarks/plots/) with the per-task cost on the y axis: flat means linear scaling.

    uv run python benchmarks/sweeps.py [--sweeps pending,workers,logs] [--plots-dir DIR]
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from controller_simulated import reconcile_round, throughput, unplaceable_round  # noqa: E402
from local_throughput import run_tasks_job  # noqa: E402
from report import Report, add_common_args, machine_facts  # noqa: E402

from iris.client import Entrypoint, IrisClient, JobState, ResourceSpec  # noqa: E402

PLOTS = Path(__file__).resolve().parent / "plots"
LINE = "a log line of about sixty characters, as a training loop might print"


def plot(
    path: Path,
    title: str,
    xlabel: str,
    xs: list[int],
    per_task: list[float],
    per_task_label: str,
    second: list[float] | None = None,
    second_label: str = "",
) -> None:
    panels = 2 if second else 1
    fig, axes = plt.subplots(1, panels, figsize=(6 * panels, 4.2), squeeze=False)
    ax = axes[0][0]
    ax.plot(xs, per_task, marker="o")
    ax.set_xscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(per_task_label)
    ax.set_ylim(bottom=0)
    ax.grid(True, which="both", alpha=0.3)
    ax.set_title("per-task cost (flat = linear scaling)")
    if second:
        ax2 = axes[0][1]
        ax2.plot(xs, second, marker="s", color="tab:red")
        ax2.set_xscale("log")
        ax2.set_xlabel(xlabel)
        ax2.set_ylabel(second_label)
        ax2.set_ylim(bottom=0)
        ax2.grid(True, which="both", alpha=0.3)
        ax2.set_title(second_label)
    facts = machine_facts()
    fig.suptitle(
        f"{title}\n{facts['cores']} cores, {facts['cpu']}, python {facts['python']}, {facts['date']}"
    )
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=90)
    plt.close(fig)
    print(f"plot: {path}", flush=True)


def pending_sweep(report: Report, sizes: list[int], fleet: int, drained: int, plots: Path, runs: int) -> None:
    per_task, rounds = [], []
    for n in sizes:
        rates = [throughput(fleet, drained, backlog=n) for _ in range(runs)]
        us = [1e6 / r for r in rates]
        report.figure(
            f"pending sweep: {drained} tasks run on {fleet} simulated workers behind {n} unplaceable, per task",
            us,
            "us",
            pending=n,
        )
        per_task.append(statistics.median(us))
        quiet, _full = unplaceable_round(n, 3)
        report.figure(f"pending sweep: control round with {n} unplaceable pending", quiet, "ms", pending=n)
        rounds.append(statistics.median(quiet))
    plot(
        plots / "pending.png",
        "Pending tasks: controller cost per task as the queue grows",
        "tasks pending (unplaceable) ahead of the measured ones",
        sizes,
        per_task,
        "µs per task, PENDING -> SUCCEEDED",
        rounds,
        "control round (ms) with that many unplaceable",
    )


def workers_sweep(report: Report, sizes: list[int], tasks: int, plots: Path, runs: int) -> None:
    per_task, rounds = [], []
    for w in sizes:
        rates = [throughput(w, tasks) for _ in range(runs)]
        us = [1e6 / r for r in rates]
        report.figure(f"workers sweep: {tasks} tasks on {w} simulated workers, per task", us, "us", workers=w)
        per_task.append(statistics.median(us))
        # enough rounds for a steady median: a round over 10 workers takes ~1 ms, over 1,000 ~100 ms
        times = reconcile_round(w, max(5, 2000 // w))
        report.figure(f"workers sweep: full reconcile round over {w} workers", times, "ms", workers=w)
        rounds.append(statistics.median(times))
    plot(
        plots / "workers.png",
        f"Workers: controller cost per task for {tasks} tasks as the fleet grows",
        "simulated workers",
        sizes,
        per_task,
        "µs per task, PENDING -> SUCCEEDED",
        rounds,
        "full reconcile round (ms)",
    )


def logs_sweep(report: Report, lines: list[int], tasks: int, plots: Path, runs: int) -> None:
    per_task = []
    res = ResourceSpec(cpu="0.1", memory="64MB")
    with IrisClient.local(workers=4, worker_cpu="16", worker_memory="16GB") as client:
        run_tasks_job(client, "warmup", 16, res)
        for k in lines:
            ms = []
            for run in range(runs):
                entry = Entrypoint.from_command("sh", "-c", f"yes '{LINE}' | head -n {k}")
                t0 = time.perf_counter()
                detail = client.submit(entry, name=f"logs-{k}-{run}", replicas=tasks, resources=res).wait(
                    timeout=1800, poll_s=0.05
                )
                if detail.state is not JobState.SUCCEEDED:
                    raise RuntimeError(f"log job ended {detail.state}: {detail.error}")
                ms.append((time.perf_counter() - t0) / tasks * 1000)
            report.figure(f"logs sweep: {tasks} tasks writing {k} lines each, per task", ms, "ms", lines=k)
            per_task.append(statistics.median(ms))
    plot(
        plots / "logs.png",
        f"Log volume: wall time per task, {tasks} tasks on 4 workers",
        "lines each task writes",
        [max(k, 1) for k in lines],
        per_task,
        "ms per task (wall)",
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add_common_args(parser, runs=1)
    parser.add_argument("--sweeps", default="pending,workers,logs")
    parser.add_argument("--plots-dir", type=Path, default=PLOTS)
    parser.add_argument("--pending", help="comma-separated backlog sizes (default 1000,...,100000)")
    parser.add_argument("--log-tasks", type=int, default=20, help="tasks per point of the logs sweep")
    args = parser.parse_args()
    pending = [1000, 3000, 10_000, 30_000, 100_000]
    fleet = 100
    drained = 1000
    workers = [10, 30, 100, 300, 1000]
    worker_tasks = 5000
    lines = [0, 100, 1000, 10_000, 100_000]
    log_tasks = args.log_tasks
    if args.tiny:
        pending, fleet, workers, worker_tasks, lines, log_tasks, args.runs = (
            [100, 300], 5, [2, 5], 100, [0, 100], 8, 1,
        )  # fmt: skip
        drained = 100
    if args.pending:
        pending = [int(n) for n in args.pending.split(",")]
    report = Report(
        "sweeps",
        args,
        {
            "pending": pending,
            "workers": workers,
            "worker_tasks": worker_tasks,
            "log_lines": lines,
            "runs": args.runs,
        },
    )
    chosen = set(args.sweeps.split(","))
    if "pending" in chosen:
        pending_sweep(report, pending, fleet, drained, args.plots_dir, args.runs)
    if "workers" in chosen:
        workers_sweep(report, workers, worker_tasks, args.plots_dir, args.runs)
    if "logs" in chosen:
        logs_sweep(report, lines, log_tasks, args.plots_dir, args.runs)


if __name__ == "__main__":
    main()
