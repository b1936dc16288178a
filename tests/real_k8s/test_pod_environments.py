"""The job's environment in Kubernetes pods, on the real control plane (node-agent nodes): a uv
project (a src/ layout) and ``--pip`` packages are built by the pod's ``build-env`` init container
with the node's uv (``kubernetes.environment_uv``) into the node's cache directory
(``kubernetes.environment_dir``) once, and the next pod reuses it (its log says so); a lock uv
cannot read fails the job as ENVIRONMENT with uv's own words. Real uv, the real package index.

The node agent's nodes are processes of this host, so they share one cache directory: the second
job reuses the environment whichever node runs it. Each user's pods mount only that user's part of
it (``<environment_dir>/users/<user>``): bob's job sees none of alice's environments."""

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
from iris.rpc.enums import JobState
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
    pythons = [Path(line.removeprefix("python: ")) for line in first + second if line.startswith("python: ")]
    [home] = {p.parent.parent.parent for p in pythons}  # the job's user's own part of the node's cache
    assert home.parent == envs / "users", pythons
    for lines in (first, second):
        assert "own package: True" in lines  # src/demo, from the attempt's workspace
        assert f"python: {home / key / 'bin' / 'python'}" in lines  # the environment's python
    assert (home / key / ".iris-ready").is_file()
    build = next(line for line in first if line.startswith(f"built environment {key} in "))
    print(
        f"node agent: first job (builds) {timings[0]:.2f}s [{build}], second job (reuses) {timings[1]:.2f}s"
    )


# Bob's task: what it sees at /iris-envs, then a write to where alice's environment would be.
PEEK = """
import os, sys
print("sees:", sorted(n for n in os.listdir(sys.argv[1]) if not n.startswith(".")))
try:
    os.makedirs(os.path.dirname(sys.argv[2]), exist_ok=True)
    with open(sys.argv[2], "w") as f:
        f.write("import os; os.system('echo planted by bob')\\n")
    print("wrote:", sys.argv[2])
except OSError as exc:
    print("write refused:", exc)
"""


def _logs_of(client: IrisClient, user: str, name: str, argv: list[str], pip: list[str]) -> list[str]:
    job = client.submit(
        Entrypoint.from_command(*argv),
        name=name,
        user=user,
        workspace=False,
        resources=ResourceSpec(cpu=0.5, memory="256MB"),
        environment=EnvironmentSpec(pip_packages=pip),
    )
    detail = job.wait(timeout=240)
    lines = list(job.logs())
    if detail.state is not JobState.SUCCEEDED:
        skip_if_index_unreachable("\n".join(lines))
    assert detail.state is JobState.SUCCEEDED, (detail, lines)
    return lines


def test_one_users_pods_cannot_see_or_touch_another_users_environments(
    k8s: tuple[LocalCluster, Path],
) -> None:
    cluster, envs = k8s
    where = ["python", "-c", "import sys, pyjokes; print('python:', sys.executable)"]
    with IrisClient(cluster.url) as client:
        first = _logs_of(client, "alice", "iso-alice-1", where, ["pyjokes==0.8.3"])
        built = [line for line in first if line.startswith("building environment")]
        assert len(built) == 1, first
        key = built[0].split()[2]
        alice = envs / "users" / "alice"
        assert f"python: {alice / key / 'bin' / 'python'}" in first, first

        # Bob (other packages) mounts only his own part: alice's key is not there, and a write to
        # where alice's environment sits in his view lands in his own tree, not in hers.
        bob_env = ["pyjokes"]
        second = _logs_of(
            client,
            "bob",
            "iso-bob",
            ["python", "-c", PEEK, "/iris-envs", f"/iris-envs/{key}/planted.pth"],
            bob_env,
        )
        sees = next(line for line in second if line.startswith("sees: "))
        assert key not in sees, second
        assert not (alice / key / "planted.pth").exists(), second
        assert any(line.startswith("write refused:") for line in second) or (
            f"wrote: {envs / 'users' / 'bob' / key / 'planted.pth'}" in second
        ), second

        # Alice's next job still reuses hers, untouched.
        third = _logs_of(client, "alice", "iso-alice-2", where, ["pyjokes==0.8.3"])
        assert any(re.fullmatch(rf"reusing environment {key} on \S+", line) for line in third), third
        assert f"python: {alice / key / 'bin' / 'python'}" in third, third
    assert not any(line.startswith("building environment") for line in third), third


def test_pip_packages_in_a_pod(k8s: tuple[LocalCluster, Path], tmp_path: Path) -> None:
    """The pod's image needs no pip: the node's uv installs the packages (once) before the task."""
    cluster, envs = k8s
    plain = tmp_path / "plain"
    plain.mkdir()
    lines = _run(cluster, plain, "--pip", "pyjokes", "--", "python", "-c", IMPORT).splitlines()
    assert "joke: True" in lines
    assert any(line.startswith("building environment") and line.endswith(": pyjokes") for line in lines)
    python = next(line.removeprefix("python: ") for line in lines if line.startswith("python: "))
    assert Path(python).parent.parent.parent.parent == envs / "users"  # the job's user's part

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
