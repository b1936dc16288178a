"""The benchmarks outside run_all (log flood, chaos, Kubernetes pod creation) still run and report
their figures at a small size (never checked for speed: CI's machine is not a benchmark machine)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"

# benchmark argv -> lines its report must contain
SMALL = {
    "logs": (
        ["--megabytes", "1"],
        ["flood: 1 MB of output written", "(a) --tail 3", "(b) -f", "(c) control rounds"],
    ),
    "chaos": (
        ["--tasks", "12", "--timeout", "300"],
        ["| experiment | load | faults |", "| chaos seed 13 | 12 tasks"],
    ),
    "k8s_pod_create": (
        ["--pods", "20", "--concurrency", "4"],
        ["pods_created_per_s", "writes_per_attempt_total"],
    ),
}


@pytest.mark.parametrize(
    "name",
    # k8s_pod_create measures on the session's real control plane (--run-dir), not a plane of its own.
    [pytest.param(n, marks=pytest.mark.real_k8s) if n == "k8s_pod_create" else n for n in sorted(SMALL)],
)
def test_benchmark_reports_at_a_small_size(name: str, request: pytest.FixtureRequest) -> None:
    args, expected = SMALL[name]
    if name == "k8s_pod_create":
        args = [*args, "--run-dir", str(request.getfixturevalue("real_control_plane").run_dir)]
    done = subprocess.run(
        [sys.executable, str(BENCHMARKS / f"{name}.py"), *args], capture_output=True, text=True, timeout=600
    )
    # k8s_pod_create exits 1 when its target is missed: that is a figure, not a breakage.
    assert done.returncode in ((0, 1) if name == "k8s_pod_create" else (0,)), done.stderr[-2000:]
    assert "Traceback" not in done.stderr, done.stderr[-2000:]
    for line in expected:
        assert line in done.stdout, f"{name} did not report {line!r}:\n{done.stdout}"
    if name == "chaos":
        row = next(r for r in done.stdout.splitlines() if r.startswith("| chaos seed"))
        cells = [c.strip() for c in row.strip("|").split("|")]
        assert cells[3:6] == ["0", "0", "0"], f"lost, duplicated or reopened tasks: {row}"
