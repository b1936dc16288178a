"""Kubernetes: a task pod with a bundle gets an init container that fetches and unpacks it into a
shared emptyDir the task runs in. The pod must be valid Kubernetes; the init script is run here as a
real process against a real controller, because the sandbox's kubelet does not run init containers."""

from __future__ import annotations

import hashlib
import io
import os
import subprocess
import sys
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest

from iris.client import LocalCluster
from iris.client.workspace import Bundle, build_bundle, upload_bundle
from iris.cluster.backends.kubernetes.config import KubernetesBackendConfig
from iris.cluster.backends.kubernetes.pods import (
    BUNDLE_INIT_CONTAINER,
    BUNDLE_INIT_SCRIPT,
    BUNDLE_TOKEN_ENV,
    WORKSPACE_DIR,
    build_pod,
)
from iris.rpc.models import Entrypoint, ResourceSpec, RunSpec

SHA = "ab" * 32
CONFIG = KubernetesBackendConfig(namespace="iris", local_queue="q")


def spec(bundle_id: str | None = SHA) -> RunSpec:
    return RunSpec(
        attempt_uid="0123456789abcdef",
        attempt_number=0,
        job_id="/alice/train",
        task_id="/alice/train/0",
        task_index=0,
        entrypoint=Entrypoint.from_command("python", "train.py"),
        resources=ResourceSpec(cpu=1, memory="1GB"),
        bundle_id=bundle_id,
    )


def env_of(container: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e["value"] for e in container.get("env", [])}


def test_pod_with_a_bundle_is_valid_and_shares_the_workspace() -> None:
    pod = build_pod(spec(), CONFIG, controller_url="http://iris:10000", backend_id="k8s")
    kubernetes_validate.validate(pod, "1.31", strict=True)
    (init,) = pod["spec"]["initContainers"]
    (task,) = pod["spec"]["containers"]
    assert init["name"] == BUNDLE_INIT_CONTAINER
    assert pod["spec"]["volumes"] == [{"name": "workspace", "emptyDir": {}}]
    assert init["volumeMounts"] == task["volumeMounts"] == [{"name": "workspace", "mountPath": WORKSPACE_DIR}]
    assert task["workingDir"] == WORKSPACE_DIR
    assert env_of(init) == {
        "IRIS_BUNDLE_ID": SHA,
        "IRIS_CONTROLLER_URL": "http://iris:10000",
        "IRIS_WORKDIR": WORKSPACE_DIR,
    }
    assert env_of(task)["IRIS_BUNDLE_ID"] == SHA


def test_token_goes_to_the_init_container_only() -> None:
    pod = build_pod(
        spec(), CONFIG, controller_url="http://iris:10000", backend_id="k8s", bundle_token="t0k$n"
    )
    kubernetes_validate.validate(pod, "1.31", strict=True)
    init, task = pod["spec"]["initContainers"][0], pod["spec"]["containers"][0]
    assert env_of(init)[BUNDLE_TOKEN_ENV] == "t0k$$n"  # Kubernetes turns $$ back into $
    assert BUNDLE_TOKEN_ENV not in env_of(task)


def test_pod_without_a_bundle_has_no_init_container() -> None:
    pod = build_pod(spec(None), CONFIG, controller_url="http://iris:10000", backend_id="k8s")
    assert "initContainers" not in pod["spec"] and "volumes" not in pod["spec"]
    assert "workingDir" not in pod["spec"]["containers"][0]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with LocalCluster(workers=0, state_dir=tmp_path_factory.mktemp("cluster")) as c:
        yield c


def run_init_script(bundle_id: str, controller_url: str, workdir: Path) -> subprocess.CompletedProcess[str]:
    env = {
        "PATH": os.environ["PATH"],
        "IRIS_BUNDLE_ID": bundle_id,
        "IRIS_CONTROLLER_URL": controller_url,
        "IRIS_WORKDIR": str(workdir),
    }
    # -I: isolated, as in a bare image: the script must need nothing but the standard library.
    return subprocess.run(
        [sys.executable, "-I", "-c", BUNDLE_INIT_SCRIPT], env=env, capture_output=True, text=True, timeout=60
    )


def test_init_script_fetches_verifies_and_unpacks(cluster: LocalCluster, tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    (ws / "pkg").mkdir(parents=True)
    (ws / "train.py").write_text("print('hi')\n")
    (ws / "pkg" / "m.py").write_text("X = 1\n")
    bundle = build_bundle(ws)
    upload_bundle(cluster.url, bundle)
    workdir = tmp_path / "workspace"
    workdir.mkdir()
    result = run_init_script(bundle.bundle_id, cluster.url, workdir)
    assert result.returncode == 0, result.stderr
    assert (workdir / "train.py").read_text() == "print('hi')\n"
    assert (workdir / "pkg" / "m.py").read_text() == "X = 1\n"


def test_init_script_fails_clearly_on_a_missing_bundle(cluster: LocalCluster, tmp_path: Path) -> None:
    result = run_init_script("0" * 64, cluster.url, tmp_path)
    assert result.returncode == 1
    assert result.stderr.startswith(f"could not fetch bundle {'0' * 64}")
    assert "404" in result.stderr


def test_every_container_runs_without_privileges_and_seccomp_is_on() -> None:
    pod = build_pod(spec(), CONFIG, controller_url="http://iris:10000", backend_id="k8s")
    kubernetes_validate.validate(pod, "1.31", strict=True)
    assert pod["spec"]["securityContext"] == {"seccompProfile": {"type": "RuntimeDefault"}}
    assert pod["spec"]["automountServiceAccountToken"] is False  # no service account configured
    for container in pod["spec"]["initContainers"] + pod["spec"]["containers"]:
        assert container["securityContext"] == {
            "allowPrivilegeEscalation": False,
            "privileged": False,
            "capabilities": {"drop": ["ALL"]},
        }
    config = KubernetesBackendConfig(namespace="iris", local_queue="q", run_as_user=1000)
    pod = build_pod(spec(), config, controller_url="http://iris:10000", backend_id="k8s")
    kubernetes_validate.validate(pod, "1.31", strict=True)
    assert pod["spec"]["securityContext"] == {
        "seccompProfile": {"type": "RuntimeDefault"},
        "runAsNonRoot": True,
        "runAsUser": 1000,
        "runAsGroup": 1000,
        "fsGroup": 1000,
    }


def test_init_script_refuses_links_as_the_worker_does(cluster: LocalCluster, tmp_path: Path) -> None:
    """The init container unpacks with the worker's unpacker: a symlink (the way past tarfile's
    own "data" filter) is refused, and nothing is written outside the work dir."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w:gz") as tar:
        link = tarfile.TarInfo("escape")
        link.type, link.linkname = tarfile.SYMTYPE, str(tmp_path / "outside")
        tar.addfile(link)
        data = b"pwned"
        member = tarfile.TarInfo("escape/file")
        member.size = len(data)
        tar.addfile(member, io.BytesIO(data))
    payload = raw.getvalue()
    upload_bundle(cluster.url, Bundle(hashlib.sha256(payload).hexdigest(), payload, 2, len(data)))
    (tmp_path / "outside").mkdir()
    workdir = tmp_path / "workspace"
    workdir.mkdir()
    result = run_init_script(hashlib.sha256(payload).hexdigest(), cluster.url, workdir)
    assert result.returncode == 1, result.stdout
    assert result.stderr.startswith("could not unpack bundle") and "link" in result.stderr
    assert list((tmp_path / "outside").iterdir()) == []
