"""Every benchmark still runs: each at its tiny size, checked for its report lines (never for speed)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"

# benchmark -> figures its tiny run must report (a prefix of each figure's name)
EXPECTED = {
    "local_throughput": [
        "20 true tasks as one job",
        "20 single-task jobs submitted back to back",
        "20 jobs in one submit_many call",
        "submit->RUNNING, idle cluster",
        "submit->RUNNING with 100 tasks pending on a full cluster",
    ],
    "controller_simulated": [
        "controller, 10 simulated workers, 1000 tasks",
        "full reconcile round over 10 workers",
        "control round with 2000 tasks pending, none placeable",
        "restart with 2000 stored tasks",
    ],
    "api_listing": ["iris job list (first 100)", "job status of one job", "status of a job with 500 tasks"],
    "api_requests": ["GET /api/v1/cluster, round trip p50", "POST /api/v1/jobs (one at a time)"],
    "scheduler_kernel": ["scheduling kernel, mixed case", "scheduling kernel, nothing fits"],
    "worker_dispatch": ["one worker daemon, 20 true attempts"],
    "runtime_start": ["runtime alone, 40 true attempts: its CPU per attempt"],
    "vs_ray": ["iris: 20 true tasks as one job"],
    "log_push": [
        "push 200 small attempts",
        "pushes/s",
        "tail 3 of each small attempt",
        "job query --tail 3",
        "push one 1 MB log",
        "tail 3 of the 1 MB log",
    ],
    "sweeps": [
        "pending sweep: 100 tasks run on 5 simulated workers behind 100",
        "workers sweep: 100 tasks on 2",
        "logs sweep: 8 tasks writing 0",
    ],
}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_benchmark_runs_at_tiny_size(name: str, tmp_path: Path) -> None:
    figures_file = tmp_path / "figures.jsonl"
    argv = [sys.executable, str(BENCHMARKS / f"{name}.py"), "--tiny", "--json", str(figures_file)]
    if name == "sweeps":
        argv += ["--plots-dir", str(tmp_path / "plots")]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=280, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.splitlines()
    assert lines[0] == f"== {name}"
    assert lines[1].startswith("machine: cores ")
    assert lines[2].startswith("sizes: ")
    printed = [line for line in lines if line.startswith("figure: [")]
    recorded = [json.loads(line) for line in figures_file.read_text().splitlines()]
    assert len(printed) == len(recorded) > 0
    names = [str(f["name"]).strip() for f in recorded]
    for expected in EXPECTED[name]:
        assert any(n.startswith(expected) for n in names), (expected, names)
    for figure in recorded:
        assert figure["runs"] and figure["verdict"] in ("PASS", "MISS", "INFO")
    if name == "sweeps":
        for plot in ("pending", "workers", "logs"):
            assert (tmp_path / "plots" / f"{plot}.png").read_bytes().startswith(b"\x89PNG")
