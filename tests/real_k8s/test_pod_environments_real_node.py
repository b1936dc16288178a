"""Job environments on a real node (a real kubelet with containerd, real containers of the local
Debian Python image): the node's network namespace has no route to the package index, so the host
pre-warms the node's uv cache (``<environment_dir>/.uv-cache``) and the pod builds offline
(``kubernetes.environment_offline``) with the node's uv binary mounted read-only. The task sees
the environment read-only (the kernel says so), and the next pod reuses it. A uv project (a src/
layout) arrives with the workspace bundle the pod fetches from the controller."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.environments.test_project_environment import skip_if_index_unreachable, write_src_project
from tests.journeys.harness import Kube

from iris.client import Entrypoint, IrisClient, JobState, LocalCluster, ResourceSpec
from iris.cluster.worker.environments import uv_binary
from iris.rpc.models import EnvironmentSpec
from iris.testing.control_plane import ControlPlane
from iris.testing.images import PYTHON_IMAGE

pytestmark = pytest.mark.real_kubelet

IRIS = [sys.executable, "-m", "iris.cli.main"]
TASK = (
    'python -c \'import sys, pyjokes; print("joke:", bool(pyjokes.get_joke())); print("python:", sys.executable)\''
    ' && touch "$VIRTUAL_ENV/x" 2>&1; echo "rc=$?"'
)
OWN = "import sys, demo; print('own package:', demo.joke_ok()); print('python:', sys.executable)"


def _uv(uv: str, *args: str, env: dict[str, str]) -> None:
    result = subprocess.run([uv, *args], env=env, capture_output=True, text=True, timeout=180)
    if result.returncode != 0:
        skip_if_index_unreachable(result.stderr)
    assert result.returncode == 0, result.stderr


@pytest.fixture(scope="module")
def node(
    real_kubelet_plane: ControlPlane, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[LocalCluster, Path, Path]]:
    """A cluster on the real node whose environments live in ``envs``, its uv cache pre-warmed
    from the host (as an operator would) with pyjokes and with the src/ layout project's lock."""
    uv = uv_binary()
    if uv is None:
        pytest.skip("no uv binary on this host")
    root = tmp_path_factory.mktemp("podenv-node")
    envs = root / "node-envs"
    project = write_src_project(root / "project")
    env = {**os.environ, "UV_CACHE_DIR": str(envs / ".uv-cache"), "UV_PYTHON_DOWNLOADS": "never"}
    _uv(uv, "venv", "--quiet", "--python", sys.executable, str(root / "warm"), env=env)
    _uv(uv, "pip", "install", "--python", str(root / "warm" / "bin" / "python"), "pyjokes", env=env)
    _uv(uv, "sync", "--frozen", "--no-install-project", "--project", str(project),
        env={**env, "UV_PROJECT_ENVIRONMENT": str(root / "warm-project")})  # fmt: skip
    kubernetes = {
        "image_pull_grace_s": 3,
        "environment_dir": str(envs),
        "environment_uv": uv,
        "environment_offline": True,
    }
    config = root / "cluster.json"
    config.write_text(json.dumps({"backend": {"kind": "kubernetes", "kubernetes": kubernetes}}))
    kube = Kube(Path(real_kubelet_plane.admin_kubeconfig), real_kubelet_plane.namespace)
    kube.clear()
    assert real_kubelet_plane.real_node is not None
    with LocalCluster(
        workers=0,
        state_dir=root / "state",
        backend="kubernetes",
        kubeconfig=real_kubelet_plane.controller_kubeconfig,
        namespace=real_kubelet_plane.namespace,
        local_queue=real_kubelet_plane.local_queue,
        controller_args=["--image", PYTHON_IMAGE, "--config", str(config)],
        # Pods reach the controller (for the bundle) on the host end of the node's veth, by token.
        one_time_token=True,
        pod_host=real_kubelet_plane.real_node["node_ip"],
    ) as cluster:
        yield cluster, envs, project
    kube.clear()


def _built_and_reused(first: list[str], second: list[str], what: str) -> str:
    built = [line for line in first if line.startswith("building environment")]
    assert len(built) == 1 and " offline: " in built[0] and what in built[0], first
    key = built[0].split()[2]
    assert any(line.startswith(f"built environment {key} in ") for line in first), first
    assert any(line.startswith(f"reusing environment {key} on ") for line in second), second
    assert not any(line.startswith("building environment") for line in second), second
    build = next(line for line in first if line.startswith(f"built environment {key} in "))
    print(f"real node, {what}: [{build}]")
    return key


def test_pip_on_a_real_node_builds_offline_from_the_prewarmed_cache(
    node: tuple[LocalCluster, Path, Path],
) -> None:
    cluster, _envs, _project = node
    logs, timings = [], []
    with IrisClient(cluster.url, token=cluster.token) as client:
        for name in ("pip-first", "pip-second"):
            started = time.monotonic()
            job = client.submit(
                Entrypoint.from_command("sh", "-c", TASK),
                name=name,
                resources=ResourceSpec(cpu=0.5, memory="512MB"),
                environment=EnvironmentSpec(pip_packages=["pyjokes"]),
                workspace=False,
            )
            detail = job.wait(timeout=240)
            logs.append(job.logs())
            timings.append(time.monotonic() - started)
            assert detail.state is JobState.SUCCEEDED, (detail.error, logs[-1])
    key = _built_and_reused(*logs, what="pyjokes")
    for lines in logs:
        assert "joke: True" in lines, lines
        assert f"python: /iris-envs/{key}/bin/python" in lines, lines  # the environment's, in the container
        assert any("Read-only file system" in line for line in lines) and "rc=1" in lines, lines
    print(f"real node, --pip: first job (builds) {timings[0]:.2f}s, second job (reuses) {timings[1]:.2f}s")


def test_a_src_layout_project_on_a_real_node(node: tuple[LocalCluster, Path, Path]) -> None:
    """`iris job run` from the project: the bundle comes from the controller, the lock is synced
    offline on the node, and the project's own package imports from the pod's workspace."""
    cluster, _envs, project = node
    env = {**os.environ, "IRIS_CONTROLLER_URL": cluster.url, "IRIS_TOKEN": cluster.token or ""}
    outputs, timings = [], []
    for name in ("project-first", "project-second"):
        started = time.monotonic()
        done = subprocess.run(
            [*IRIS, "job", "run", "--name", name, "--memory", "512MB", "--", "python", "-c", OWN],
            cwd=project, env=env, capture_output=True, text=True, timeout=240, check=False,
        )  # fmt: skip
        timings.append(time.monotonic() - started)
        assert done.returncode == 0, done.stdout + done.stderr
        outputs.append(done.stdout.splitlines())
    key = _built_and_reused(*outputs, what="uv sync --frozen (uv.lock")
    for lines in outputs:
        assert "own package: True" in lines, lines
        assert f"python: /iris-envs/{key}/bin/python" in lines, lines
    print(f"real node, project: first job (builds) {timings[0]:.2f}s, second job (reuses) {timings[1]:.2f}s")
