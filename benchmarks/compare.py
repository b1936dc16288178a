"""Compare two checkouts of Iris benchmark by benchmark, interleaved, so machine load hits both alike.

    uv run python benchmarks/compare.py --before /tmp/iris-old --after . --rounds 3
    uv run python benchmarks/compare.py --before /tmp/iris-old --after . --only scheduler_kernel --tiny
    uv run python benchmarks/compare.py --before /tmp/iris-old --after . --only local_throughput \
        --args="--cases tasks,batch --runs 5"

Each checkout runs its own ``benchmarks/<name>.py --json`` with its own environment (``uv run`` in that
checkout). For every benchmark the rounds alternate before, after, after, before, ... and each figure
keeps its best median over the rounds (the least disturbed one). The table says, per figure, the change
in the figure's good direction: a positive change is better, a negative one worse. Best-of picks each
side's luckiest run, so the table also pairs the rounds (round i's before with round i's after, run
back to back): in how many pairs the after side was better, and the median change over the pairs. On a
machine that drifts, the pairs are the fairer reading.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from run_all import BENCHMARKS, choose

# Units where a larger figure is better; any other unit (ms, s, bytes, ...) is better smaller.
HIGHER_IS_BETTER = ("/s", "per s", "x", "×")


def higher_is_better(unit: str, target: object = None) -> bool:
    """A figure's good direction: its target's (>= is more-is-better), else its unit's."""
    if isinstance(target, dict) and target.get("op") in (">=", "<="):
        return target["op"] == ">="
    return any(unit.endswith(suffix) or unit == suffix for suffix in HIGHER_IS_BETTER)


def run_one(checkout: Path, name: str, tiny: bool, extra: list[str]) -> list[dict[str, object]]:
    """One run of one benchmark in ``checkout``; its figures (empty when the script is missing or fails)."""
    script = checkout / "benchmarks" / f"{name}.py"
    if not script.exists():
        return []
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "figures.jsonl"
        argv = ["uv", "run", "--frozen", "python", str(script), "--json", str(out), *extra]
        if tiny:
            argv.append("--tiny")
        env = {**os.environ, "UV_PYTHON_DOWNLOADS": "never"}
        env.pop("VIRTUAL_ENV", None)
        code = subprocess.call(argv, cwd=checkout, env=env, stdout=subprocess.DEVNULL)
        if code != 0 or not out.exists():
            print(f"   {checkout.name}: {name} exited {code}", file=sys.stderr)
            return []
        return [json.loads(line) for line in out.read_text().splitlines() if line.strip()]


def _change(before: float, after: float, more_is_better: bool) -> str:
    if before == 0 or after == 0:
        return "n/a"
    ratio = after / before if more_is_better else before / after
    return f"{(ratio - 1) * 100:+.1f}%"


def best(a: float | None, b: float, more_is_better: bool) -> float:
    if a is None:
        return b
    return max(a, b) if more_is_better else min(a, b)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--before", required=True, type=Path, help="checkout measured as 'before'")
    parser.add_argument("--after", required=True, type=Path, help="checkout measured as 'after'")
    parser.add_argument("--rounds", type=int, default=2, help="runs of each benchmark per checkout")
    parser.add_argument("--only", help=f"comma-separated subset of {', '.join(BENCHMARKS)}")
    parser.add_argument("--tiny", action="store_true", help="tiny sizes (does everything run?)")
    parser.add_argument(
        "--args", default="", help="more arguments for every run of the chosen benchmarks (one string)"
    )
    args = parser.parse_args()
    extra = shlex.split(args.args)
    chosen = choose(args.only)
    if chosen is None:
        return 2
    sides = {"before": args.before.resolve(), "after": args.after.resolve()}
    # figure key -> side -> the figure's median of each round, in round order; plus each figure's unit
    figures: dict[tuple[str, str], dict[str, list[float]]] = {}
    units: dict[tuple[str, str], tuple[str, bool]] = {}
    for name in chosen:
        t0 = time.perf_counter()
        for round_no in range(args.rounds):
            order = ("before", "after") if round_no % 2 == 0 else ("after", "before")
            for side in order:
                for f in run_one(sides[side], name, args.tiny, extra):
                    key = (name, str(f["name"]).strip())
                    unit = str(f["unit"]).strip()
                    more = higher_is_better(unit, f.get("target"))
                    units[key] = (unit, more)
                    slot = figures.setdefault(key, {"before": [], "after": []})
                    slot[side].append(float(str(f["median"])))
        print(f"-- {name}: {args.rounds} round(s) each side in {time.perf_counter() - t0:.0f}s", flush=True)
    rows = [
        "| benchmark | figure | before | after | change (+ better) | pairs after better (median change) |",
        "|---|---|---|---|---|---|",
    ]
    for (name, figure), slot in figures.items():
        unit, more = units[(name, figure)]
        before = after = None
        for v in slot["before"]:
            before = best(before, v, more)
        for v in slot["after"]:
            after = best(after, v, more)
        change = "n/a" if before is None or after is None else _change(before, after, more)
        shown = [f"{v:,.4g} {unit}" if v is not None else "-" for v in (before, after)]
        pairs = [(b, a) for b, a in zip(slot["before"], slot["after"], strict=False) if a and b]
        if pairs:
            changes = sorted(((a / b if more else b / a) - 1) * 100 for b, a in pairs)
            better = sum(1 for c in changes if c > 0)
            paired = f"{better} of {len(pairs)} ({changes[len(changes) // 2]:+.1f}%)"
        else:
            paired = "n/a"
        rows.append(f"| {name} | {figure} | {shown[0]} | {shown[1]} | {change} | {paired} |")
    print("\n".join(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
