"""Chaos experiment of docs/reliability.md: faults over 1,000 tasks on a local cluster.

    uv run python benchmarks/chaos.py [--tasks 1000] [--seed 13]

Prints the figures row (experiment, load, faults, lost, duplicated, reopened, double-active,
recovery time) and every double-active overlap found (task, attempts, seconds, last fault).
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from iris.testing.chaos import run_chaos


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tasks", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=13)
    parser.add_argument("--grace", type=float, default=3.0, help="controller's worker grace, seconds")
    parser.add_argument(
        "--timeout",
        type=float,
        default=3600.0,
        help="seconds to wait; tasks unfinished by then count as lost",
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="iris-chaos-") as tmp:
        report = run_chaos(
            Path(tmp), tasks=args.tasks, seed=args.seed, worker_grace_s=args.grace, timeout_s=args.timeout
        )
    row = report.row(f"chaos seed {args.seed}")
    print("| " + " | ".join(row) + " |")
    print("| " + " | ".join(row.values()) + " |")
    for o in report.overlaps:
        print(f"double-active: {o.task_id} {o.attempts[0]} {o.attempts[1]} {o.seconds:.2f} s after {o.fault}")
    for task_id in report.lost:
        print(f"lost: {task_id}")
    for task_id in report.reopened:
        print(f"reopened: {task_id}")


if __name__ == "__main__":
    main()
