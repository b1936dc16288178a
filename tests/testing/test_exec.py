"""pods/exec over websockets (channel protocol v5/v4): lightkube, kubectl and the official client."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from kubernetes import client, config
from kubernetes.stream import stream
from lightkube import ApiError, Client, KubeConfig
from tests.conftest import wait_until

from iris.testing.fake_apiserver import PODS
from iris.testing.k8s_sandbox import Sandbox, start_sandbox

KUBECTL = shutil.which("kubectl") or "/usr/bin/kubectl"


@pytest.fixture(scope="module")
def sandbox(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sandbox]:
    with start_sandbox(tmp_path_factory.mktemp("exec"), nodes=1) as sandbox:
        for name, command in (("runner", ["sleep", "120"]), ("done", ["true"])):
            container = {
                "name": "task",
                "image": "busybox",
                "command": command,
                "env": [{"name": "FOO", "value": "bar"}],
            }
            body = {
                "metadata": {"name": name, "labels": {"kueue.x-k8s.io/queue-name": "iris"}},
                "spec": {"restartPolicy": "Never", "containers": [container]},
            }
            sandbox.server.store.create(PODS, sandbox.namespace, body)
        wait_until(
            lambda: sandbox.kubelet.pid_of(sandbox.namespace, "runner"), timeout=10, what="runner running"
        )
        wait_until(
            lambda: (
                sandbox.server.store.get(PODS, sandbox.namespace, "done")["status"].get("phase")
                == "Succeeded"
            ),
            timeout=10,
        )
        yield sandbox


def test_lightkube_exec_output_exit_code_and_stdin(sandbox: Sandbox) -> None:
    kube = Client(KubeConfig.from_file(sandbox.kubeconfig_path))
    script = "echo out $FOO; echo err >&2; exit 3"
    result = kube.exec(
        "runner",
        namespace="iris",
        container="task",
        command=["sh", "-c", script],
        stdout=True,
        stderr=True,
        timeout=10,
    )
    assert (result.stdout, result.stderr, result.exit_code) == ("out bar\n", "err\n", 3)
    piped = kube.exec("runner", namespace="iris", command=["cat"], stdin="piped", stdout=True, timeout=10)
    assert (piped.stdout, piped.exit_code) == ("piped", 0)
    with pytest.raises(ApiError, match='exec: "no-such-command"'):
        kube.exec("runner", namespace="iris", command=["no-such-command"], stdout=True, timeout=10)


def test_official_client_stream(sandbox: Sandbox) -> None:
    core = client.CoreV1Api(config.new_client_from_config(config_file=str(sandbox.kubeconfig_path)))
    output = stream(
        core.connect_get_namespaced_pod_exec,
        "runner",
        "iris",
        command=["sh", "-c", "echo hi from $HOSTNAME"],
        stdout=True,
        stderr=True,
        stdin=False,
        tty=False,
    )
    assert output == "hi from runner\n"


@pytest.mark.skipif(not Path(KUBECTL).exists(), reason="kubectl not installed")
def test_kubectl_exec(sandbox: Sandbox) -> None:
    base = [KUBECTL, "--kubeconfig", str(sandbox.kubeconfig_path), "exec"]
    done = subprocess.run(
        [*base, "runner", "--", "sh", "-c", "echo via kubectl; exit 4"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert (done.returncode, done.stdout) == (4, "via kubectl\n")
    counted = subprocess.run(
        [*base, "-i", "runner", "--", "wc", "-c"], input="hello", capture_output=True, text=True, timeout=30
    )
    assert counted.stdout.strip() == "5"


def test_exec_refusals(sandbox: Sandbox) -> None:
    ca = sandbox.server.tls_material.ca_cert
    headers = {"Authorization": f"Bearer {sandbox.token}"}
    with httpx.Client(
        verify=__import__("ssl").create_default_context(cafile=str(ca)), headers=headers
    ) as http:
        base = f"{sandbox.server_url}/api/v1/namespaces/iris/pods"
        plain = http.get(f"{base}/runner/exec", params={"command": "true"})
        assert plain.status_code == 400 and "websocket" in plain.json()["message"]
        assert http.get(f"{base}/ghost/exec", params={"command": "true"}).status_code == 404
        finished = http.get(f"{base}/done/exec", params={"command": "true"}, headers={"Upgrade": "websocket"})
        assert finished.status_code == 400 and "completed pod" in finished.json()["message"]
        assert http.get(f"{base}/runner/exec").json()["message"] == "you must specify at least 1 command"
