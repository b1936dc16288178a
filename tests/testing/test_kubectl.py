"""kubectl (a real client-go client) against the fake server over HTTPS with a token."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from iris.testing.fake_apiserver import PODS, FakeApiServer

KUBECTL = shutil.which("kubectl") or "/usr/bin/kubectl"
pytestmark = pytest.mark.skipif(not Path(KUBECTL).exists(), reason="kubectl not installed")

POD_YAML = """
apiVersion: v1
kind: Pod
metadata:
  name: {name}
  labels: {{app: demo, role: "{role}"}}
spec:
  restartPolicy: Never
  containers:
  - name: main
    image: busybox
    command: ["sh", "-c", "echo hi"]
"""


def kubectl(
    kubeconfig: Path, namespace: str, *args: str, stdin: str | None = None, check: bool = True
) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [KUBECTL, "--kubeconfig", str(kubeconfig), "-n", namespace, *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=30,
    )
    if check:
        assert done.returncode == 0, done.stderr
    return done


def test_create_get_table_json_and_delete(kubeconfig: Path, namespace: str) -> None:
    kubectl(kubeconfig, namespace, "create", "-f", "-", stdin=POD_YAML.format(name="one", role="a"))
    kubectl(kubeconfig, namespace, "apply", "-f", "-", stdin=POD_YAML.format(name="two", role="b"))
    table = kubectl(kubeconfig, namespace, "get", "pods").stdout.splitlines()
    assert table[0].split() == ["NAME", "READY", "STATUS", "RESTARTS", "AGE"]
    assert [line.split()[:3] for line in table[1:]] == [["one", "0/1", "Pending"], ["two", "0/1", "Pending"]]
    listed = json.loads(
        kubectl(kubeconfig, namespace, "get", "pods", "-l", "app=demo,role=b", "-o", "json").stdout
    )
    assert [p["metadata"]["name"] for p in listed["items"]] == ["two"]
    kubectl(kubeconfig, namespace, "apply", "-f", "-", stdin=POD_YAML.format(name="two", role="c"))
    assert (
        kubectl(kubeconfig, namespace, "get", "pod", "two", "-o", "jsonpath={.metadata.labels.role}").stdout
        == "c"
    )
    out = kubectl(kubeconfig, namespace, "delete", "pod", "one").stdout
    assert 'pod "one" deleted' in out
    assert kubectl(kubeconfig, namespace, "get", "pod", "one", check=False).returncode != 0


def test_logs(kubeconfig: Path, namespace: str, api_server: FakeApiServer) -> None:
    kubectl(kubeconfig, namespace, "create", "-f", "-", stdin=POD_YAML.format(name="talker", role="a"))
    waiting = kubectl(kubeconfig, namespace, "logs", "talker", check=False)
    assert waiting.returncode != 0 and "is waiting to start: ContainerCreating" in waiting.stderr
    uid = api_server.store.get(PODS, namespace, "talker")["metadata"]["uid"]
    log = api_server.pod_logs.open(uid, "main")  # what the kubelet simulator does
    log.write_line("hello")
    log.write_line("world")
    log.finish()
    assert kubectl(kubeconfig, namespace, "logs", "talker").stdout == "hello\nworld\n"
    assert kubectl(kubeconfig, namespace, "logs", "talker", "--tail=1").stdout == "world\n"
    stamped = kubectl(kubeconfig, namespace, "logs", "talker", "--timestamps", "-f").stdout.splitlines()
    assert [line.split(" ", 1)[1] for line in stamped] == ["hello", "world"] and stamped[0].endswith(
        "Z hello"
    )


def test_kueue_kinds_and_api_resources(kubeconfig: Path, namespace: str) -> None:
    manifest = f"""
apiVersion: kueue.x-k8s.io/v1beta1
kind: LocalQueue
metadata: {{name: lq, namespace: {namespace}}}
spec: {{clusterQueue: cq}}
"""
    kubectl(kubeconfig, namespace, "apply", "-f", "-", stdin=manifest)
    assert (
        kubectl(kubeconfig, namespace, "get", "localqueues", "-o", "name").stdout.strip()
        == "localqueue.kueue.x-k8s.io/lq"
    )
    resources = kubectl(
        kubeconfig, namespace, "api-resources", "--api-group=kueue.x-k8s.io", "-o", "name"
    ).stdout.split()
    assert "workloads.kueue.x-k8s.io" in resources
