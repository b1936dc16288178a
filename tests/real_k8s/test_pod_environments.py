"""The job's environment in Kubernetes pods, on the real control plane (node-agent nodes): a uv
project (a src/ layout) and ``--pip`` packages are built by the pod's ``build-env`` init container
with the node's uv (``kubernetes.environment_uv``) into the node's cache directory
(``kubernetes.environment_dir``) once, and the next pod reuses it (its log says so); a lock uv
cannot read fails the job as ENVIRONMENT with uv's own words. Real uv, the real package index.

The node agent's nodes are processes of this host, so they share one cache directory: the second
job reuses the environment whichever node runs it."""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.cli.helpers import run_iris
from tests.environments.test_project_environment import (
    IMPORT,
    skip_if_index_unreachable,
    write_project,
    write_src_project,
)

from iris.client import Entrypoint, IrisClient, LocalCluster, ResourceSpec
from iris.cluster.worker.environments import uv_binary
from iris.rpc.models import EnvironmentSpec
from iris.testing.control_plane import ControlPlane

pytestmark = pytest.mark.real_k8s

OWN = "import sys, demo; print('own package:', demo.joke_ok()); print('python:', sys.executable)"


@pytest.fixture(scope="module")
def k8s(
    real_control_plane: ControlPlane, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[LocalCluster, Path]]:
    uv = uv_binary()
    if uv is None:
        pytest.skip("no uv binary on this host")
    root = tmp_path_factory.mktemp("podenv")
    envs = root / "node-envs"
    # This host's CA bundle (a proxy's, maybe) for the build, as an operator would set it.
    build_env = {k: os.environ[k] for k in ("SSL_CERT_FILE", "HTTPS_PROXY", "https_proxy") if k in os.environ}
    kubernetes = {"environment_dir": str(envs), "environment_uv": uv, "environment_build_env": build_env}
    config = root / "cluster.yaml"
    config.write_text(
        json.dumps(
            {
                "backend": {"kind": "kubernetes", "backend_id": "kubernetes", "kubernetes": kubernetes},
                "defaults": {"worker": {"reconcile_interval_s": 0.5}},
            }
        )
    )
    with LocalCluster(
        workers=0,
        state_dir=root / "state",
        backend="kubernetes",
        kubeconfig=real_control_plane.controller_kubeconfig,
        namespace=real_control_plane.namespace,
        local_queue=real_control_plane.local_queue,
        controller_args=["--config", str(config)],
    ) as cluster:
        yield cluster, envs


def _run(cluster: LocalCluster, cwd: Path, *args: str) -> str:
    result = run_iris(cluster, cwd, "job", "run", *args, timeout=240)
    out = result.stdout + result.stderr
    if result.returncode != 0:
        skip_if_index_unreachable(out)
    assert result.returncode == 0, out
    return result.stdout


def test_a_projects_environment_is_built_once_on_the_node_and_reused(
    k8s: tuple[LocalCluster, Path], tmp_path: Path
) -> None:
    cluster, envs = k8s
    project = write_src_project(tmp_path / "project")
    timings, outputs = [], []
    for name in ("pe-first", "pe-second"):
        started = time.monotonic()
        outputs.append(_run(cluster, project, "--name", name, "--", "python", "-c", OWN))
        timings.append(time.monotonic() - started)
    first, second = (out.splitlines() for out in outputs)
    built = [line for line in first if line.startswith("building environment")]
    assert len(built) == 1 and "uv sync --frozen (uv.lock" in built[0], first
    key = built[0].split()[2]
    assert any(line.startswith(f"built environment {key} in ") for line in first), first
    assert any(line.startswith("uv: ") and "pyjokes==0.8.3" in line for line in first), first  # uv's output
    assert any(re.fullmatch(rf"reusing environment {key} on \S+", line) for line in second), second
    assert not any(line.startswith("building environment") for line in second), second
    for lines in (first, second):
        assert "own package: True" in lines  # src/demo, from the attempt's workspace
        assert f"python: {envs / key / 'bin' / 'python'}" in lines  # the environment's python
    assert (envs / key / ".iris-ready").is_file()
    build = next(line for line in first if line.startswith(f"built environment {key} in "))
    print(
        f"node agent: first job (builds) {timings[0]:.2f}s [{build}], second job (reuses) {timings[1]:.2f}s"
    )


def test_pip_packages_in_a_pod(k8s: tuple[LocalCluster, Path], tmp_path: Path) -> None:
    """The pod's image needs no pip: the node's uv installs the packages (once) before the task."""
    cluster, envs = k8s
    plain = tmp_path / "plain"
    plain.mkdir()
    lines = _run(cluster, plain, "--pip", "pyjokes", "--", "python", "-c", IMPORT).splitlines()
    assert "joke: True" in lines
    assert any(line.startswith("building environment") and line.endswith(": pyjokes") for line in lines)
    python = next(line.removeprefix("python: ") for line in lines if line.startswith("python: "))
    assert Path(python).parent.parent.parent == envs

    # A callable with the same packages: the same environment, reused, with Iris (the callable
    # runner) still importable from the image's own packages.
    with IrisClient(cluster.url) as client:
        job = client.submit(
            Entrypoint.from_callable(_joke_module),
            name="pip-callable",
            resources=ResourceSpec(cpu=0.5, memory="256MB"),
            environment=EnvironmentSpec(pip_packages=["pyjokes"]),
        )
        [where] = job.result(timeout=180)
        assert Path(where).is_relative_to(Path(python).parent.parent), where
        assert any(line.startswith("reusing environment") for line in job.logs())


def _joke_module() -> str:
    import pyjokes  # type: ignore[import-not-found]

    return str(pyjokes.__file__)


def test_a_broken_lock_fails_the_pod_as_environment(k8s: tuple[LocalCluster, Path], tmp_path: Path) -> None:
    cluster, _ = k8s
    project = write_project(tmp_path / "broken", lock="this is [[[ not a lock\n")
    result = run_iris(cluster, project, "job", "run", "--", "python", "-c", IMPORT, timeout=240)
    out = result.stdout + result.stderr
    assert result.returncode != 0, out
    assert "FAILED (ENVIRONMENT)" in out and "Failed to parse `uv.lock`" in out, out
