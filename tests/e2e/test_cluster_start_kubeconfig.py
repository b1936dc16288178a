"""`iris cluster start --local --backend kubernetes`: without --kubeconfig it starts a real control
plane of its own (from the build cache) with node-agent nodes and says so; with --kubeconfig it
runs against that cluster (here the session's real control plane, standing in for any cluster)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from tests.conftest import wait_until

from iris.cli.main import cli
from iris.client import Entrypoint, IrisClient, JobState, ResourceSpec
from iris.rpc.errors import IrisError, Unauthenticated
from iris.testing.control_plane import ControlPlane
from iris.testing.proc_state import running

IRIS = [sys.executable, "-m", "iris.cli.main"]


def _start(argv: list[str], log_path: Path) -> subprocess.Popen[bytes]:
    log = log_path.open("wb")
    try:
        return subprocess.Popen(
            [*IRIS, "cluster", "start", "--local", "--backend", "kubernetes", "--port", "0", *argv],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    finally:
        log.close()


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
    proc.wait(timeout=120)


def _one_time_token(out: Path) -> str:
    """The token the local cluster printed for the CLI (it requires one, like the worker backend)."""
    found = wait_until(
        lambda: re.search(r"export IRIS_TOKEN=(\S+)", out.read_text()), timeout=60, what="the token"
    )
    return found.group(1)


def _job_succeeds(client: IrisClient, job_id: str) -> bool:
    try:
        return client.job(job_id).status() is JobState.SUCCEEDED
    except IrisError:
        return False


@pytest.mark.real_k8s
def test_local_cluster_runs_its_pods_in_the_given_cluster(
    real_control_plane: ControlPlane, tmp_path: Path
) -> None:
    cp = real_control_plane
    out = tmp_path / "start.log"
    proc = _start(
        ["--kubeconfig", str(cp.controller_kubeconfig), "--namespace", cp.namespace,
         "--queue", cp.local_queue, "--state-dir", str(tmp_path / "state")],
        out,
    )  # fmt: skip
    try:
        match = wait_until(
            lambda: re.search(r"controller: (http://\S+)", out.read_text()), timeout=60, what="the URL"
        )
        token = _one_time_token(out)
        text = out.read_text()
        assert f"kubeconfig: {cp.controller_kubeconfig}" in text
        assert "real control plane at" not in text and not (tmp_path / "state" / "k8s").exists()
        with pytest.raises(Unauthenticated):  # the one-time token is required, as with workers
            IrisClient(match.group(1)).list_jobs()
        client = IrisClient(match.group(1), token=token)
        job = client.submit(
            Entrypoint.from_command("echo", "hi"),
            name="given",
            resources=ResourceSpec(cpu=0.5, memory="64MB"),
        )
        wait_until(lambda: _job_succeeds(client, job.job_id), timeout=90, what="the job done")
        pods = json.loads(
            cp.kubectl("-n", cp.namespace, "get", "pods", "-l", "iris.managed=true", "-o", "json").stdout
        )
        ours = [p for p in pods["items"] if p["metadata"]["annotations"].get("iris.job_id") == job.job_id]
        assert [p["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] for p in ours] == [cp.local_queue]
        client.close()
    finally:
        _stop(proc)
        cp.kubectl(
            "-n", cp.namespace, "delete", "pods", "-l", "iris.managed=true", "--wait=false", check=False
        )


@pytest.mark.real_k8s
def test_local_cluster_starts_its_own_real_control_plane(tmp_path: Path) -> None:
    """One cluster start of ~30 s on a loaded machine: the whole local Kubernetes path, once."""
    state = tmp_path / "state"
    out = tmp_path / "start.log"
    proc = _start(["--state-dir", str(state), "--real-node", "no"], out)
    pids: list[int] = []
    try:
        # The whole banner (it ends with "Press Ctrl-C"): its lines are written one by one.
        wait_until(
            lambda: "Press Ctrl-C to stop." in out.read_text(), timeout=300, what=f"the banner (log: {out})"
        )
        text = out.read_text()
        match = re.search(r"controller: (http://\S+)", text)
        assert match, text
        assert "(kubernetes backend) is up" in text
        assert re.search(
            r"kubernetes: real control plane at https://127\.0\.0\.1:\d+ \(with Kueue\)", text
        ), text
        assert re.search(r"nodes: +\S+, \S+ \(node agent", text), text
        assert f"kubeconfig: {state / 'k8s'}" in text
        url = match.group(1)
        token = _one_time_token(out)
        env = {**os.environ, "IRIS_CONTROLLER_URL": url, "IRIS_TOKEN": token}

        def iris(*args: str) -> subprocess.CompletedProcess[str]:
            return subprocess.run([*IRIS, *args], capture_output=True, text=True, env=env, timeout=120)

        status = json.loads(iris("cluster", "status", "--json").stdout)
        assert status["kind"] == "kubernetes" and status["capabilities"] == ["cluster"]
        workers = iris("worker", "list")
        assert workers.returncode == 1 and "no worker store" in workers.stderr

        # A workspace bundle reaches the pod through its init container.
        workspace = tmp_path / "ws"
        workspace.mkdir()
        (workspace / "helper.py").write_text('GREETING = "hello from the bundle"\n')
        (workspace / "main.py").write_text(
            "import os\nimport helper\nprint(helper.GREETING)\nprint(os.getcwd())\n"
        )
        client = IrisClient(url, token=token)
        job = client.submit(
            Entrypoint.from_command("python", "main.py"),
            name="bundled",
            resources=ResourceSpec(cpu=0.5, memory="128MB"),
            workspace=workspace,
        )
        detail = job.wait(timeout=120)
        assert detail.state is JobState.SUCCEEDED, detail.error
        lines = job.logs()
        assert lines[0] == "hello from the bundle"
        assert not lines[1].startswith(str(workspace))  # it ran from the pod's own workspace volume

        # A uv project's environment is built on the node, in the cluster's state dir (no network:
        # the project has no dependencies), not in /var/cache of this machine.
        project = tmp_path / "project"
        project.mkdir()
        (project / "pyproject.toml").write_text(
            '[project]\nname = "ws"\nversion = "0.1.0"\nrequires-python = ">=3.10"\ndependencies = []\n'
        )
        (project / "uv.lock").write_text(
            'version = 1\nrevision = 5\nrequires-python = ">=3.10"\n\n'
            '[[package]]\nname = "ws"\nversion = "0.1.0"\nsource = { virtual = "." }\n'
        )
        job = client.submit(
            Entrypoint.from_command("python", "-c", "import sys; print('python:', sys.executable)"),
            name="project-env",
            resources=ResourceSpec(cpu=0.5, memory="256MB"),
            workspace=project,
        )
        detail = job.wait(timeout=120)
        lines = job.logs()
        assert detail.state is JobState.SUCCEEDED, (detail.error, lines)
        assert any(line.startswith("building environment") for line in lines), lines
        python = next(line.removeprefix("python: ") for line in lines if line.startswith("python: "))
        assert python.startswith(str(state / "k8s" / "node-envs") + "/"), lines
        client.close()
        plane = json.loads((state / "k8s" / "state.json").read_text())
        pids = list((plane.get("pids") or {}).values())
        assert pids and all(running(pid) for pid in pids)
    finally:
        _stop(proc)
    # Ctrl-C (SIGTERM) stops the control plane with the cluster.
    wait_until(lambda: not any(running(pid) for pid in pids), timeout=60, what="the control plane stopped")


def test_kubeconfig_needs_the_kubernetes_backend(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text("apiVersion: v1\n")
    result = CliRunner().invoke(cli, ["cluster", "start", "--local", "--kubeconfig", str(kubeconfig)])
    assert result.exit_code == 2
    assert "--kubeconfig goes with --backend kubernetes" in result.output
