"""The sandbox: server + Kueue + kubelet in one process, used through kubectl like a real cluster."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from tests.conftest import wait_until

from iris.testing.fake_apiserver import PODS
from iris.testing.k8s_sandbox import start_sandbox
from iris.testing.proc_state import running

KUBECTL = shutil.which("kubectl") or "/usr/bin/kubectl"
needs_kubectl = pytest.mark.skipif(not Path(KUBECTL).exists(), reason="kubectl not installed")

JOB = """
apiVersion: v1
kind: Pod
metadata:
  name: {name}
  labels: {{kueue.x-k8s.io/queue-name: iris}}
spec:
  restartPolicy: Never
  containers:
  - name: task
    image: python
    command: ["sh", "-c", "{script}"]
    resources: {{requests: {{cpu: "{cpu}"}}}}
"""


def kubectl(kubeconfig: Path, *args: str, stdin: str | None = None) -> str:
    done = subprocess.run(
        [KUBECTL, "--kubeconfig", str(kubeconfig), *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


@needs_kubectl
def test_a_queued_pod_runs_to_completion(tmp_path: Path) -> None:
    with start_sandbox(tmp_path, nodes=2, cpu_per_node="2", memory_per_node="4Gi") as sandbox:
        assert sandbox.server_url.startswith("https://")
        nodes = kubectl(sandbox.kubeconfig_path, "get", "nodes", "-o", "name").split()
        assert nodes == ["node/node-0", "node/node-1"]
        kubectl(
            sandbox.kubeconfig_path,
            "create",
            "-f",
            "-",
            stdin=JOB.format(name="hello", script="echo hello from $HOSTNAME", cpu="1"),
        )
        kubectl(
            sandbox.kubeconfig_path,
            "create",
            "-f",
            "-",
            stdin=JOB.format(name="toobig", script="true", cpu="8"),
        )

        def phase(name: str) -> str:
            return kubectl(sandbox.kubeconfig_path, "get", "pod", name, "-o", "jsonpath={.status.phase}")

        wait_until(lambda: phase("hello") == "Succeeded", timeout=15, what="hello Succeeded")
        assert kubectl(sandbox.kubeconfig_path, "logs", "hello") == "hello from hello\n"
        workloads = json.loads(kubectl(sandbox.kubeconfig_path, "get", "workloads", "-o", "json"))["items"]
        messages = {
            w["metadata"]["name"]: [c.get("message") for c in w["status"]["conditions"]] for w in workloads
        }
        toobig = next(m for name, m in messages.items() if name.startswith("pod-toobig"))
        assert toobig == [
            "couldn't assign flavors to pod set main: insufficient quota for cpu in flavor default-flavor, request > maximum capacity (8 > 4)"
        ]
        table = kubectl(sandbox.kubeconfig_path, "get", "pods")
        assert "SchedulingGated" in table and "Completed" in table


def test_stop_kills_running_pods(tmp_path: Path) -> None:
    sandbox = start_sandbox(tmp_path, nodes=1)
    sandbox.server.store.create(
        PODS,
        sandbox.namespace,
        {
            "metadata": {"name": "forever", "labels": {"kueue.x-k8s.io/queue-name": "iris"}},
            "spec": {
                "restartPolicy": "Never",
                "containers": [{"name": "task", "image": "busybox", "command": ["sleep", "300"]}],
            },
        },
    )
    pid = wait_until(
        lambda: sandbox.kubelet.pid_of(sandbox.namespace, "forever"), timeout=10, what="pod running"
    )
    sandbox.stop()
    wait_until(
        lambda: not running(pid),
        timeout=5,
    )


@needs_kubectl
def test_command_line_runs_until_sigterm(tmp_path: Path) -> None:
    ready = tmp_path / "ready.json"
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "iris.testing.k8s_sandbox",
            "--state-dir",
            str(tmp_path / "state"),
            "--ready-file",
            str(ready),
            "--nodes",
            "2",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        wait_until(ready.exists, timeout=20, what="ready file")
        info = json.loads(ready.read_text())
        assert info["namespace"] == "iris" and info["pid"] == process.pid
        assert (
            kubectl(Path(info["kubeconfig"]), "get", "localqueues", "-o", "name").strip()
            == "localqueue.kueue.x-k8s.io/iris"
        )
    finally:
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=10) == 0
