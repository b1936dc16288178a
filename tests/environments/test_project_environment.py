"""The project environment: a workspace with ``pyproject.toml`` + ``uv.lock`` runs its tasks in
``uv sync --frozen`` of it, built once per lock, Python and extras on the worker and reused; a
broken lock fails the job as ENVIRONMENT with uv's own words. Real processes, real uv, the real
package index (pyjokes: tiny, pure Python, no dependencies)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from iris.client import IrisClient, JobState, LocalCluster
from iris.client.workspace import project_environment
from iris.cluster.controller.failure import diagnose
from iris.rpc.enums import TaskState
from iris.rpc.errors import InvalidArgument
from iris.rpc.models import ENVIRONMENT_ERROR_PREFIX, AttemptStatus, EnvironmentSpec, TaskStatus

IRIS = [sys.executable, "-m", "iris.cli.main"]
NETWORK_HINTS = ("failed to fetch", "dns error", "could not connect", "error sending request", "timed out")
PYPROJECT = """\
[project]
name = "demo"
version = "0.1.0"
requires-python = ">=3.10"
dependencies = ["pyjokes"]

[project.optional-dependencies]
extra = []
"""
# What `uv lock` wrote for PYPROJECT (pyjokes 0.8.3 from PyPI).
UV_LOCK = """\
version = 1
revision = 5
requires-python = ">=3.10"

[[package]]
name = "demo"
version = "0.1.0"
source = { virtual = "." }
dependencies = [
    { name = "pyjokes" },
]

[package.metadata]
requires-dist = [{ name = "pyjokes" }]
provides-extras = ["extra"]

[[package]]
name = "pyjokes"
version = "0.8.3"
source = { registry = "https://pypi.org/simple" }
sdist = { url = "https://files.pythonhosted.org/packages/30/cc/2d25e5397d7a6d362971f23b42c8b624c5298c0864a1000cd587f39e6748/pyjokes-0.8.3.tar.gz", hash = "sha256:5735d31e973d5b6934b46b89431505733c3110f9b66eac0ff0be86f7f3646423", size = 44617, upload-time = "2024-08-10T12:39:31.98Z" }
wheels = [
    { url = "https://files.pythonhosted.org/packages/1d/dd/2495fe4d1ff804ec3094ad4c76cd0fcfb8902d630ce690118560a40df171/pyjokes-0.8.3-py3-none-any.whl", hash = "sha256:12836e61bc7a2c1ff302604a040f0f63ac36c5c947c20319fcb5d1ab37bac46e", size = 47563, upload-time = "2024-08-10T12:39:30.73Z" },
]
"""  # noqa: E501
IMPORT = "import pyjokes, sys; print('joke:', bool(pyjokes.get_joke())); print('python:', sys.executable)"


def write_project(root: Path, lock: str = UV_LOCK) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "pyproject.toml").write_text(PYPROJECT)
    (root / "uv.lock").write_text(lock)
    return root


def skip_if_index_unreachable(text: str) -> None:
    if any(hint in text.lower() for hint in NETWORK_HINTS):
        pytest.skip(f"the package index is unreachable: {text[-300:]}")


# ------------------------------------------------------------------ pure parts


def test_a_uv_project_asks_for_its_environment_by_default(tmp_path: Path) -> None:
    project = write_project(tmp_path / "p")
    plain = tmp_path / "plain"
    plain.mkdir()
    assert project_environment(None, project) == EnvironmentSpec(project=True)
    assert project_environment(None, project, extras=["gpu"]) == EnvironmentSpec(project=True, extras=["gpu"])
    pip = EnvironmentSpec(pip_packages=["rich"])
    assert project_environment(pip, project) == EnvironmentSpec(pip_packages=["rich"], project=True)
    assert project_environment(pip, project, sync=False) == pip  # --no-sync
    assert project_environment(None, plain) is None  # no uv.lock: nothing to sync
    assert project_environment(None, None) is None  # --no-workspace
    with pytest.raises(InvalidArgument, match="pyproject.toml and a uv.lock"):
        project_environment(None, plain, sync=True)
    with pytest.raises(InvalidArgument, match="extras are optional dependencies"):
        project_environment(None, plain, extras=["gpu"])
    with pytest.raises(ValueError, match="need project=True"):
        EnvironmentSpec(extras=["gpu"])
    with pytest.raises(ValueError):
        EnvironmentSpec(project=True, extras=["--index-url=http://x"])


def test_an_environment_error_is_failure_kind_environment() -> None:
    error = (
        f"{ENVIRONMENT_ERROR_PREFIX}uv sync --frozen failed (uv exited with code 2): error: Failed to parse"
    )
    attempt = AttemptStatus(
        attempt_uid="a1", attempt_number=0, state=TaskState.FAILED, created_at=0.0, error=error
    )
    task = TaskStatus(
        task_id="/u/j/0", job_id="/u/j", task_index=0, state=TaskState.FAILED,
        current_attempt_uid="a1", attempts=[attempt], error=error,
    )  # fmt: skip
    failure = diagnose(task, memory_limit_bytes=0)
    assert failure is not None and failure.kind == "environment" and failure.summary == error


# ------------------------------------------------------------------ on a local cluster


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[LocalCluster]:
    with LocalCluster(workers=1, state_dir=tmp_path / "cluster") as c:
        yield c


def iris_run(cluster: LocalCluster, cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*IRIS, "job", "run", *args],
        cwd=cwd,
        env={**os.environ, "IRIS_CONTROLLER_URL": cluster.url, "COLUMNS": "200"},
        capture_output=True,
        text=True,
        timeout=180,
        stdin=subprocess.DEVNULL,
    )


def system_lines(client: IrisClient, job_id: str) -> list[str]:
    return [line.line for line in client.job(job_id).log_lines() if line.stream == "system"]


def test_project_environment_is_built_once_and_reused(tmp_path: Path, cluster: LocalCluster) -> None:
    project = write_project(tmp_path / "project")
    timings = []
    outputs = []
    for _ in range(2):
        started = time.monotonic()
        result = iris_run(cluster, project, "--", "python", "-c", IMPORT)
        timings.append(time.monotonic() - started)
        if result.returncode != 0:
            skip_if_index_unreachable(result.stdout + result.stderr)
        assert result.returncode == 0, result.stdout + result.stderr
        outputs.append(result.stdout)
    with IrisClient(cluster.url) as client:
        jobs = sorted(client.list_jobs().jobs, key=lambda j: j.submitted_at)
        first, second = (system_lines(client, j.job_id) for j in jobs)
    built = [line for line in first if line.startswith("building environment")]
    assert len(built) == 1 and "uv sync --frozen" in built[0], first
    env_hash = built[0].split()[2].rstrip(":")
    assert any(line.startswith(f"built environment {env_hash} in ") for line in first)
    assert any(line.startswith("uv: ") and "pyjokes==0.8.3" in line for line in first)  # uv's own output
    assert f"reusing environment {env_hash}" in second
    assert not any(line.startswith("building environment") for line in second)
    for out in outputs:
        assert "joke: True" in out
        assert f"/envs/{env_hash}/" in out  # the task's python is the project environment's
    print(f"first run (builds) {timings[0]:.2f}s, second run (reuses) {timings[1]:.2f}s")

    # --no-sync opts out: the worker's own environment has no pyjokes.
    result = iris_run(cluster, project, "--no-sync", "--", "python", "-c", IMPORT)
    assert result.returncode == 1 and "No module named 'pyjokes'" in result.stdout + result.stderr


def test_a_broken_lock_fails_as_environment_with_uvs_words(tmp_path: Path, cluster: LocalCluster) -> None:
    project = write_project(tmp_path / "broken", lock="this is [[[ not a lock\n")
    result = iris_run(cluster, project, "--max-retries", "1", "--", "python", "-c", IMPORT)
    assert result.returncode != 0
    assert "FAILED (ENVIRONMENT)" in result.stdout + result.stderr, result.stdout + result.stderr
    assert "Failed to parse `uv.lock`" in result.stdout + result.stderr
    with IrisClient(cluster.url) as client:
        (job,) = client.list_jobs().jobs
        detail = client.job(job.job_id).detail()
        assert detail.state is JobState.FAILED and detail.state_label() == "FAILED (ENVIRONMENT)"
        (task,) = detail.tasks
        assert task.failure is not None and task.failure.kind == "environment"
        assert "Failed to parse `uv.lock`" in task.failure.summary
        assert task.attempt_count == 2  # an application failure: --max-retries applies, nothing more
        lines = system_lines(client, job.job_id)
    assert any(line.startswith("uv: error: Failed to parse `uv.lock`") for line in lines)

    # An extra the project does not define: uv says so, through --extra.
    good = write_project(tmp_path / "good")
    result = iris_run(cluster, good, "--extra", "nope", "--", "python", "-c", IMPORT)
    assert result.returncode != 0
    assert "FAILED (ENVIRONMENT)" in result.stdout + result.stderr
    assert "Extra `nope` is not defined" in result.stdout + result.stderr


# A src/ layout project with a build system (`uv lock` of it: the project is an editable source).
SRC_PYPROJECT = """\
[project]
name = "demo"
version = "0.1.0"
requires-python = ">=3.10"
dependencies = ["pyjokes"]

[build-system]
requires = ["hatchling"]
build-backend = "hatchling.build"
"""
SRC_LOCK = UV_LOCK.replace('source = { virtual = "." }', 'source = { editable = "." }').replace(
    'provides-extras = ["extra"]\n', ""
)
SRC_INIT = "import pyjokes\n\n\ndef joke_ok():\n    return bool(pyjokes.get_joke())\n"
IMPORT_OWN = "import demo; print('own package:', demo.joke_ok())"


def write_src_project(root: Path) -> Path:
    """A project whose own package lives in src/demo (not importable from the workspace root)."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "pyproject.toml").write_text(SRC_PYPROJECT)
    (root / "uv.lock").write_text(SRC_LOCK)
    (root / "src" / "demo").mkdir(parents=True)
    (root / "src" / "demo" / "__init__.py").write_text(SRC_INIT)
    (root / "scripts").mkdir()
    (root / "scripts" / "run.py").write_text(IMPORT_OWN + "\n")
    return root


def test_a_src_layout_project_imports_its_own_package(tmp_path: Path, cluster: LocalCluster) -> None:
    project = write_src_project(tmp_path / "srcproject")
    for command in (["python", "-c", IMPORT_OWN], ["python", "scripts/run.py"]):
        result = iris_run(cluster, project, "--", *command)
        if result.returncode != 0:
            skip_if_index_unreachable(result.stdout + result.stderr)
        assert result.returncode == 0, result.stdout + result.stderr
        assert "own package: True" in result.stdout
