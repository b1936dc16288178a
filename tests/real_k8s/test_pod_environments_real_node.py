"""``--pip`` on a real node (a real kubelet with containerd, real containers of the local Debian
Python image): the node's network namespace has no route to the package index, so the host
pre-warms the node's uv cache (``<environment_dir>/.uv-cache``) and the pod builds offline
(``kubernetes.environment_offline``) with the node's uv binary mounted read-only. The task sees
the environment read-only (the kernel says so), and the next pod reuses it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from tests.environments.test_project_environment import skip_if_index_unreachable
from tests.journeys.harness import kubernetes_cluster

from iris.client import Entrypoint, JobState, ResourceSpec
from iris.cluster.worker.environments import uv_binary
from iris.rpc.models import EnvironmentSpec
from iris.testing.control_plane import ControlPlane
from iris.testing.images import PYTHON_IMAGE

pytestmark = pytest.mark.real_kubelet

TASK = (
    'python -c \'import sys, pyjokes; print("joke:", bool(pyjokes.get_joke())); print("python:", sys.executable)\''
    ' && touch "$VIRTUAL_ENV/x" 2>&1; echo "rc=$?"'
)


def test_pip_on_a_real_node_builds_offline_from_the_prewarmed_cache(
    real_kubelet_plane: ControlPlane, tmp_path: Path
) -> None:
    uv = uv_binary()
    if uv is None:
        pytest.skip("no uv binary on this host")
    envs = tmp_path / "node-envs"
    # The operator's pre-warm, from the host: the same requirement, into the node's uv cache.
    warm = tmp_path / "warm"
    env = {**os.environ, "UV_CACHE_DIR": str(envs / ".uv-cache"), "UV_PYTHON_DOWNLOADS": "never"}
    subprocess.run([uv, "venv", "--quiet", "--python", sys.executable, str(warm)], env=env, check=True)
    result = subprocess.run(
        [uv, "pip", "install", "--python", str(warm / "bin" / "python"), "pyjokes"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    if result.returncode != 0:
        skip_if_index_unreachable(result.stderr)
    assert result.returncode == 0, result.stderr
    kubernetes = {
        "default_image": PYTHON_IMAGE,
        "image_pull_grace_s": 3,
        "environment_dir": str(envs),
        "environment_uv": uv,
        "environment_offline": True,
    }
    config = json.dumps({"backend": {"kind": "kubernetes", "kubernetes": kubernetes}})
    with kubernetes_cluster(real_kubelet_plane, tmp_path, config) as (client, _kube):
        logs, timings = [], []
        for name in ("pip-first", "pip-second"):
            started = time.monotonic()
            job = client.submit(
                Entrypoint.from_command("sh", "-c", TASK),
                name=name,
                resources=ResourceSpec(cpu=0.5, memory="512MB"),
                environment=EnvironmentSpec(pip_packages=["pyjokes"]),
            )
            detail = job.wait(timeout=240)
            logs.append(job.logs())
            timings.append(time.monotonic() - started)
            assert detail.state is JobState.SUCCEEDED, (detail.error, logs[-1])
    first, second = logs
    built = [line for line in first if line.startswith("building environment")]
    assert len(built) == 1 and built[0].endswith(" offline: pyjokes"), first
    key = built[0].split()[2]
    assert any(line.startswith(f"built environment {key} in ") for line in first), first
    assert any(line.startswith(f"reusing environment {key} on ") for line in second), second
    for lines in (first, second):
        assert "joke: True" in lines, lines
        assert f"python: /iris-envs/{key}/bin/python" in lines, lines  # the environment's, in the container
        assert any("Read-only file system" in line for line in lines) and "rc=1" in lines, lines
    build = next(line for line in first if line.startswith(f"built environment {key} in "))
    print(f"real node: first job (builds) {timings[0]:.2f}s [{build}], second job (reuses) {timings[1]:.2f}s")
