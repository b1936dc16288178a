"""Run every benchmark and print one table of all figures beside their targets.

    uv run python benchmarks/run_all.py                   # full sizes (tens of minutes)
    uv run python benchmarks/run_all.py --tiny            # tiny sizes: does everything still run?
    uv run python benchmarks/run_all.py --only local_throughput,api_listing
    uv run python benchmarks/run_all.py --ray-python /tmp/rayenv/bin/python   # include Ray

Each benchmark runs as its own process (so none shares a GIL or a cache with another) and streams
its report; the table at the end is markdown, ready for the README's performance section.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from report import machine_facts

HERE = Path(__file__).resolve().parent
BENCHMARKS = (
    "local_throughput",
    "controller_simulated",
    "api_listing",
    "api_requests",
    "scheduler_kernel",
    "worker_dispatch",
    "runtime_start",
    "vs_ray",
    "sweeps",
    "log_push",
)


def table(figures: list[dict[str, object]]) -> str:
    rows = ["| benchmark | figure | median | target | |", "|---|---|---|---|---|"]
    for f in figures:
        target = f["target"]
        goal = f"{target['op']} {target['value']:,g} {f['unit']}" if isinstance(target, dict) else ""
        median = float(str(f["median"]))
        value = f"{median:,.0f}" if abs(median) >= 100 else f"{median:.3g}"
        rows.append(
            f"| {f['benchmark']} | {str(f['name']).strip()} | {value} {f['unit']} | {goal} | {f['verdict']} |"
        )
    return "\n".join(rows)


def choose(only: str | None) -> list[str] | None:
    """The benchmarks ``--only`` names (all when None); None, after saying why, if one is unknown."""
    chosen = only.split(",") if only else list(BENCHMARKS)
    unknown = set(chosen) - set(BENCHMARKS)
    if unknown:
        print(f"unknown benchmark(s): {', '.join(sorted(unknown))}", file=sys.stderr)
        return None
    return chosen


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--tiny", action="store_true")
    parser.add_argument("--only", help=f"comma-separated subset of {', '.join(BENCHMARKS)}")
    parser.add_argument("--ray-python", help="passed to vs_ray.py")
    parser.add_argument("--plots-dir", help="passed to sweeps.py (default benchmarks/plots/)")
    args = parser.parse_args()
    chosen = choose(args.only)
    if chosen is None:
        return 2
    failed = []
    with tempfile.TemporaryDirectory() as tmp:
        results = Path(tmp) / "figures.jsonl"
        for name in chosen:
            argv = [sys.executable, str(HERE / f"{name}.py"), "--json", str(results)]
            if args.tiny:
                argv.append("--tiny")
            if name == "vs_ray" and args.ray_python:
                argv += ["--ray-python", args.ray_python]
            if name == "sweeps" and args.plots_dir:
                argv += ["--plots-dir", args.plots_dir]
            t0 = time.perf_counter()
            code = subprocess.call(argv)
            print(f"-- {name} finished in {time.perf_counter() - t0:.0f}s (exit {code})", flush=True)
            if code != 0:
                failed.append(name)
        figures = [json.loads(line) for line in results.read_text().splitlines()] if results.exists() else []
    facts = machine_facts()
    print(f"\nmachine: {facts['cores']} cores, {facts['cpu']}, python {facts['python']}, {facts['date']}")
    print(table(figures))
    if failed:
        print(f"failed: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
