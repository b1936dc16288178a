"""The project environment (and --pip) of a job that runs in a container image: the worker builds
it in that image (its python3, the worker's uv mounted), once per lock and image, and mounts it
read-only into the task's container. A real dockerd, the cached Debian test image, real PyPI."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.cli.helpers import run_iris
from tests.environments.test_project_environment import (
    IMPORT_OWN,
    skip_if_index_unreachable,
    write_project,
    write_src_project,
)

from iris.client import IrisClient
from iris.client.local_cluster import LocalCluster
from iris.testing import container_engine as engines
from iris.testing.images import PYTHON_IMAGE

pytestmark = pytest.mark.skipif(not engines.available(), reason="dockerd is not installed")

SCRIPT = (
    "import sys, pyjokes, platform; print('joke:', bool(pyjokes.get_joke()));"
    " print('python:', sys.executable, platform.python_version())"
)


@pytest.fixture
def cluster(container_engine: engines.Engine, tmp_path: Path) -> Iterator[LocalCluster]:
    with LocalCluster(workers=1, worker_cpu="4", worker_memory="4GB", state_dir=tmp_path / "cluster") as lc:
        yield lc


def test_project_environment_is_built_in_the_image_and_reused(cluster: LocalCluster, tmp_path: Path) -> None:
    project = write_project(tmp_path / "project")
    outputs = []
    for _ in range(2):
        result = run_iris(
            cluster, project, "job", "run", "--image", PYTHON_IMAGE, "--", "python3", "-c", SCRIPT
        )
        if result.returncode != 0:
            skip_if_index_unreachable(result.stdout + result.stderr)
        assert result.returncode == 0, result.stdout + result.stderr
        outputs.append(result.stdout)
    with IrisClient(cluster.url) as client:
        jobs = sorted(client.list_jobs().jobs, key=lambda j: j.submitted_at)
        first, second = (
            [line.line for line in client.job(j.job_id).log_lines() if line.stream == "system"] for j in jobs
        )
    built = [line for line in first if line.startswith("building environment")]
    assert len(built) == 1 and f"in image {PYTHON_IMAGE}" in built[0], first
    env_hash = built[0].split()[2]
    assert f"reusing environment {env_hash}" in second, second
    for out in outputs:
        assert "joke: True" in out
        python = next(line for line in out.splitlines() if line.startswith("python: "))
        # The environment's python, linked to the image's Debian 3.11 (not the worker's interpreter).
        assert f"/envs/{env_hash}/bin/python3" in python and " 3.11." in python, out
    # It was mounted read-only: the task cannot change it for the next one.
    result = run_iris(
        cluster, project, "job", "run", "--image", PYTHON_IMAGE, "--",
        "sh", "-c", 'touch "$VIRTUAL_ENV/x" 2>&1; echo "rc=$?"',
    )  # fmt: skip
    assert "Read-only file system" in result.stdout and "rc=1" in result.stdout, result.stdout


def test_a_src_layout_project_imports_its_own_package_in_the_image(
    cluster: LocalCluster, tmp_path: Path
) -> None:
    project = write_src_project(tmp_path / "srcproject")
    result = run_iris(
        cluster, project, "job", "run", "--image", PYTHON_IMAGE, "--", "python3", "-c", IMPORT_OWN
    )
    if result.returncode != 0:
        skip_if_index_unreachable(result.stdout + result.stderr)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "own package: True" in result.stdout
