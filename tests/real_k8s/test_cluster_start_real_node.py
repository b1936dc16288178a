"""`iris cluster start --local --backend kubernetes` on a machine that allows a real node (root,
containerd): it says so, a job runs on a node whose runtime is containerd, `iris job exec`
and `kubectl exec` reach the task's container, and `iris job run` with its default packaging of
the working directory works (the pod fetches the bundle from the controller). One cluster start (~40 s on a loaded machine): the
whole local path with a real kubelet, once."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from tests.conftest import wait_until

from iris.client import Entrypoint, IrisClient, JobState, ResourceSpec
from iris.testing.control_plane.real_node import missing_requirements
from iris.testing.proc_state import running

pytestmark = pytest.mark.real_kubelet
IRIS = [sys.executable, "-m", "iris.cli.main"]


def test_cluster_start_runs_jobs_on_a_real_containerd_node(tmp_path: Path) -> None:
    if os.environ.get("IRIS_SKIP_REAL_K8S") == "1":
        pytest.skip("IRIS_SKIP_REAL_K8S=1")
    if os.geteuid() != 0:
        pytest.skip("a real kubelet node needs root")
    assert not missing_requirements(), missing_requirements()
    state = tmp_path / "state"
    out = tmp_path / "start.log"
    with out.open("wb") as log:
        proc = subprocess.Popen(
            [*IRIS, "cluster", "start", "--local", "--backend", "kubernetes", "--port", "0",
             "--state-dir", str(state)],
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
    pids: list[int] = []
    try:

        def url() -> re.Match[str] | None:
            assert proc.poll() is None, out.read_text()
            return re.search(r"controller: (http://\S+)", out.read_text())

        match = wait_until(
            url,
            timeout=300,
            what=f"the URL (log: {out})",
        )
        text = out.read_text()
        assert re.search(r"nodes: +iris-kubelet-0 \(real kubelet, containerd", text), text
        assert re.search(r"pods reach: +http://10\.\d+\.0\.1:\d+ ", text), text
        token = wait_until(
            lambda: re.search(r"export IRIS_TOKEN=(\S+)", out.read_text()), timeout=60, what="the token"
        ).group(1)
        env = {**os.environ, "IRIS_CONTROLLER_URL": match.group(1), "IRIS_TOKEN": token}

        def iris(*args: str) -> subprocess.CompletedProcess[str]:
            return subprocess.run([*IRIS, *args], capture_output=True, text=True, env=env, timeout=120)

        client = IrisClient(match.group(1), token=token)
        job = client.submit(
            Entrypoint.from_command("sh", "-c", "python3 -c 'print(\"ready\")'; sleep 120"),
            name="on-containerd",
            resources=ResourceSpec(cpu=0.5, memory="128MB"),
        )
        wait_until(lambda: "ready" in job.logs(), timeout=120, what="the task running")
        admin = str(state / "k8s" / "admin.kubeconfig")
        kubectl = ["kubectl", "--kubeconfig", admin, "-n", "iris"]
        pods = json.loads(
            subprocess.run([*kubectl, "get", "pods", "-o", "json"], capture_output=True, text=True).stdout
        )["items"]
        [pod] = [p for p in pods if p["metadata"]["annotations"].get("iris.job_id") == job.job_id]
        node = subprocess.run(
            [*kubectl, "get", "node", pod["spec"]["nodeName"], "-o",
             "jsonpath={.status.nodeInfo.containerRuntimeVersion}"],
            capture_output=True, text=True,
        ).stdout  # fmt: skip
        assert node.startswith("containerd://"), node
        done = iris("job", "exec", job.job_id, "--", "sh", "-c", "cat /etc/debian_version; echo $IRIS_JOB_ID")
        assert done.returncode == 0, done.stderr
        assert done.stdout.split()[1] == job.job_id
        assert done.stdout.split()[0].startswith("12.")  # the image's Debian, not the host's files
        kexec = subprocess.run(
            [*kubectl, "exec", pod["metadata"]["name"], "-c", "task", "--", "sh", "-c", "echo via-kubectl"],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert kexec.stdout.strip() == "via-kubectl", kexec.stderr
        # The default packaging works: the pod fetches the bundle from the controller.
        workspace = tmp_path / "workspace"
        workspace.mkdir()
        (workspace / "mylib.py").write_text("ANSWER = 6 * 7\n")
        ran = subprocess.run(
            [*IRIS, "job", "run", "--name", "ws", "--cpu", "0.25", "--memory", "128",
             "--", "python", "-c", "import mylib; print('answer', mylib.ANSWER)"],
            cwd=workspace, capture_output=True, text=True, env=env, timeout=180,
        )  # fmt: skip
        assert ran.returncode == 0 and "answer 42" in ran.stdout, ran.stdout + ran.stderr
        assert job.kill() in (JobState.KILLED, JobState.RUNNING)
        client.close()
        plane = json.loads((state / "k8s" / "state.json").read_text())
        pids = [*(plane.get("pids") or {}).values(), *(plane["real_node"]["pids"].values())]
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=120)
    wait_until(lambda: not any(running(pid) for pid in pids), timeout=60, what="the control plane stopped")
