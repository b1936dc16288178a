"""The shared report format of every benchmark: machine facts, sizes, medians and targets.

Each benchmark prints a header (``machine:`` and ``sizes:`` lines) and one ``figure:`` line per
measured figure: the median of its runs, every run, and the target beside it with PASS or MISS.
With ``--json PATH`` it also appends its figures to PATH (one JSON object a line), which
``run_all.py`` gathers into one table.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import iris.client.client as _iris_client

# The benchmarks measure Iris, not packaging the repository they run from into every job.
_iris_client.DEFAULT_WORKSPACE = False


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def machine_facts() -> dict[str, object]:
    return {
        "cores": os.cpu_count(),
        "cpu": cpu_model(),
        "python": platform.python_version(),
        "os": f"{platform.system()} {platform.release()}",
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "load_1m": round(os.getloadavg()[0], 2) if hasattr(os, "getloadavg") else None,
    }


def percentile(values: list[float], q: float) -> float:
    """The q-quantile (0..1) by nearest rank; 0.0 for no values."""
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


@dataclass
class Target:
    """``value`` with ``op`` '>=' (more is better) or '<=' (less is better)."""

    op: str
    value: float

    def met(self, measured: float) -> bool:
        return measured >= self.value if self.op == ">=" else measured <= self.value


def at_least(value: float) -> Target:
    return Target(">=", value)


def at_most(value: float) -> Target:
    return Target("<=", value)


def _fmt(value: float) -> str:
    if abs(value) >= 100:
        return f"{value:,.0f}"
    if abs(value) >= 10:
        return f"{value:.1f}"
    return f"{value:.2f}"


@dataclass
class Figure:
    benchmark: str
    name: str
    unit: str
    runs: list[float]
    target: Target | None = None
    sizes: dict[str, object] = field(default_factory=dict)

    @property
    def median(self) -> float:
        return statistics.median(self.runs)

    @property
    def verdict(self) -> str:
        if self.target is None:
            return "INFO"
        return "PASS" if self.target.met(self.median) else "MISS"

    def line(self) -> str:
        if len(self.runs) > 12:  # many samples (rounds in a window): their spread, not each one
            ordered = sorted(self.runs)
            p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
            runs = f"min {_fmt(ordered[0])}, p99 {_fmt(p99)}, max {_fmt(ordered[-1])}"
        else:
            runs = ", ".join(_fmt(r) for r in self.runs)
        target = f"   target {self.target.op} {_fmt(self.target.value)} {self.unit}" if self.target else ""
        return (
            f"figure: [{self.verdict}] {self.name}: {_fmt(self.median)} {self.unit}"
            f" (median of {len(self.runs)}: {runs}){target}"
        )

    def as_json(self) -> dict[str, object]:
        data = asdict(self)
        data["median"] = self.median
        data["verdict"] = self.verdict
        return data


class Report:
    """Collects and prints one benchmark's figures; see the module docstring for the format."""

    def __init__(self, benchmark: str, args: argparse.Namespace, sizes: dict[str, object]) -> None:
        self.benchmark = benchmark
        self.json_path: Path | None = getattr(args, "json", None)
        self.sizes = sizes
        self.figures: list[Figure] = []
        facts = machine_facts()
        print(f"== {benchmark}")
        print("machine: " + ", ".join(f"{k} {v}" for k, v in facts.items()))
        print("sizes: " + ", ".join(f"{k}={v}" for k, v in sizes.items()), flush=True)

    def figure(
        self, name: str, runs: list[float], unit: str, target: Target | None = None, **sizes: object
    ) -> Figure:
        fig = Figure(self.benchmark, name, unit, list(runs), target, {**self.sizes, **sizes})
        self.figures.append(fig)
        print(fig.line(), flush=True)
        if self.json_path is not None:
            with open(self.json_path, "a") as out:
                out.write(json.dumps(fig.as_json()) + "\n")
        return fig

    def note(self, text: str) -> None:
        print(f"  {text}", flush=True)


def add_common_args(parser: argparse.ArgumentParser, runs: int = 3) -> None:
    parser.add_argument("--runs", type=int, default=runs, help="repetitions; each figure is their median")
    parser.add_argument("--tiny", action="store_true", help="tiny sizes: check it works, not how fast")
    parser.add_argument("--json", type=Path, help="append the figures to this file, one JSON object a line")


def stderr(text: str) -> None:
    print(text, file=sys.stderr, flush=True)
