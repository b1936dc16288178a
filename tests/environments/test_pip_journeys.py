"""``iris job run --pip`` from a scratch directory, with real processes: the task imports a module
next to train.py (from the bundle) and a package from the index (from the job's environment), and
a second run on the same cluster reuses the environment instead of building it again."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from iris.client import IrisClient, JobState, LocalCluster

IRIS = [sys.executable, "-m", "iris.cli.main"]
PACKAGE = "pyjokes"
NETWORK_HINTS = ("failed to fetch", "dns error", "could not connect", "error sending request", "timed out")

TRAIN = """\
import sys
import helper
import pyjokes
print(helper.banner())
print("joke:", bool(pyjokes.get_joke()))
print("python:", sys.executable)
"""


@pytest.fixture
def scratch(tmp_path: Path) -> Path:
    root = tmp_path / "scratch"
    root.mkdir()
    (root / "train.py").write_text(TRAIN)
    (root / "helper.py").write_text('def banner():\n    return "helper imported"\n')
    return root


def skip_if_index_unreachable(text: str) -> None:
    if any(hint in text.lower() for hint in NETWORK_HINTS):
        pytest.skip(f"the package index is unreachable: {text[-300:]}")


def test_local_run_with_pip_package_and_a_sibling_module(scratch: Path) -> None:
    result = subprocess.run(
        [*IRIS, "job", "run", "--local", "--pip", PACKAGE, "--", "python", "train.py"],
        cwd=scratch,
        capture_output=True,
        text=True,
        timeout=180,
    )
    if result.returncode != 0:
        skip_if_index_unreachable(result.stdout + result.stderr)
    assert result.returncode == 0, result.stderr
    out = result.stdout.splitlines()
    assert "helper imported" in out
    assert "joke: True" in out
    python = next(line.removeprefix("python: ") for line in out if line.startswith("python: "))
    assert "/envs/" in python  # the job's environment, not the worker's own interpreter


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[LocalCluster]:
    with LocalCluster(workers=1, state_dir=tmp_path / "cluster") as c:
        yield c


def run_cli(scratch: Path, cluster: LocalCluster) -> tuple[str, float]:
    env = {**os.environ, "IRIS_CONTROLLER_URL": cluster.url}
    started = time.monotonic()
    result = subprocess.run(
        [*IRIS, "job", "run", "--no-wait", "--json", "--pip", PACKAGE, "--", "python", "train.py"],
        cwd=scratch,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    job_id = json.loads(result.stdout)["job_id"]
    with IrisClient(cluster.url) as client:
        detail = client.job(job_id).wait(timeout=180)
        if detail.state is not JobState.SUCCEEDED:
            text = "\n".join(line.line for line in client.job(job_id).log_lines())
            skip_if_index_unreachable(text)
            raise AssertionError(f"job {job_id} {detail.state.value}: {detail.error}\n{text}")
    return job_id, time.monotonic() - started


def test_second_run_reuses_the_environment(scratch: Path, cluster: LocalCluster) -> None:
    first, first_s = run_cli(scratch, cluster)
    second, second_s = run_cli(scratch, cluster)
    with IrisClient(cluster.url) as client:
        logs = {
            job_id: [(line.stream, line.line) for line in client.job(job_id).log_lines()]
            for job_id in (first, second)
        }
    built = [
        text for stream, text in logs[first] if stream == "system" and text.startswith("building environment")
    ]
    assert len(built) == 1
    env_hash = built[0].split()[2].rstrip(":")
    assert ("system", f"reusing environment {env_hash}") in logs[second]
    assert not any(text.startswith("building environment") for _, text in logs[second])
    for job_id in (first, second):
        assert ("stdout", "helper imported") in logs[job_id]
        assert ("stdout", "joke: True") in logs[job_id]
    envs = list((cluster.state_dir / "workers" / "worker-0" / "envs").iterdir())
    assert [p.name for p in envs if p.is_dir()] == [env_hash]
    print(f"first run (builds the environment) {first_s:.2f}s, second run (reuses it) {second_s:.2f}s")


def test_bad_requirement_fails_the_job_with_uvs_output(scratch: Path, cluster: LocalCluster) -> None:
    env = {**os.environ, "IRIS_CONTROLLER_URL": cluster.url}
    result = subprocess.run(
        [*IRIS, "job", "run", "--pip", "not a requirement!!", "--", "python", "train.py"],
        cwd=scratch,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode != 0
    assert "uv exited with code" in result.stderr
    with IrisClient(cluster.url) as client:
        (job,) = client.list_jobs().jobs
        lines = [line.line for line in client.job(job.job_id).log_lines()]
    assert any(line.startswith("uv: ") for line in lines)
    assert any("installing not a requirement!!" in line for line in lines)


def read_data_and_joke() -> None:
    import sys

    import pyjokes

    with open("data.txt") as f:  # the cwd is the unpacked workspace
        print("data:", f.read().strip())
    print("joke:", bool(pyjokes.get_joke()), "python:", sys.executable)


def test_sdk_callable_runs_in_its_environment_and_workspace(scratch: Path, cluster: LocalCluster) -> None:
    from iris.client import Entrypoint, EnvironmentSpec

    (scratch / "data.txt").write_text("from the workspace\n")
    with IrisClient(cluster.url) as client:
        job = client.submit(
            Entrypoint.from_callable(read_data_and_joke),
            environment=EnvironmentSpec(pip_packages=[PACKAGE]),
            workspace=scratch,
        )
        detail = job.wait(timeout=180)
        lines = [line.line for line in job.log_lines()]
    if detail.state is not JobState.SUCCEEDED:
        skip_if_index_unreachable("\n".join(lines))
    assert detail.state is JobState.SUCCEEDED, lines
    assert "data: from the workspace" in lines
    joke = next(line for line in lines if line.startswith("joke:"))
    assert joke.startswith("joke: True python:") and "/envs/" in joke
