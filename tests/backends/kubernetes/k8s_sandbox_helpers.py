"""A fake API server with Iris's manifests applied by kubectl, plus small polling helpers."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from iris.cluster.backends.kubernetes.manifests import manifests_yaml, render_manifests
from iris.rpc.models import DesiredAttempt, Entrypoint, ResourceSpec, RunSpec
from iris.testing.fake_apiserver import PODS, FakeApiServer, write_kubeconfig

T = TypeVar("T")
NAMESPACE = "iris"
KUBECTL = "/usr/bin/kubectl"


def wait_for(condition: Callable[[], T], *, timeout: float = 20.0, what: str = "condition") -> T:
    deadline = time.monotonic() + timeout
    last: T | None = None
    while time.monotonic() < deadline:
        last = condition()
        if last:
            return last
        time.sleep(0.02)
    raise AssertionError(f"timed out after {timeout}s waiting for {what} (last: {last!r})")


def kubectl(kubeconfig: Path, *args: str, stdin: str | None = None) -> str:
    done = subprocess.run(
        [KUBECTL, "--kubeconfig", str(kubeconfig), *args],
        input=stdin.encode() if stdin is not None else None,
        capture_output=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr.decode()
    return done.stdout.decode()


def install(kubeconfig: Path, namespace: str = NAMESPACE) -> None:
    """What an operator does: `iris k8s manifests | kubectl apply -f -` (the fake serves Kueue v1beta1)."""
    kubectl(
        kubeconfig,
        "apply",
        "-f",
        "-",
        stdin=manifests_yaml(render_manifests(namespace=namespace, kueue_api_version="v1beta1")),
    )


@dataclass
class FakeCluster:
    server: FakeApiServer
    kubeconfig: Path

    def pods(self) -> list[dict[str, Any]]:
        return self.server.store.list(PODS, NAMESPACE).items

    def pod(self, name: str) -> dict[str, Any] | None:
        return self.server.store.try_get(PODS, NAMESPACE, name)

    def set_status(self, name: str, status: dict[str, Any], *, node: str | None = None) -> None:
        """Play the kubelet (and scheduler) for one pod."""
        if node is not None:
            self.server.store.bind_pod(NAMESPACE, name, node)

        def mutate(pod: dict[str, Any]) -> dict[str, Any]:
            pod["status"] = status
            return pod

        self.server.store.update(PODS, NAMESPACE, name, mutate, subresource="status")

    def finish_deletion(self, name: str) -> None:
        """Play the kubelet confirming a graceful deletion."""
        self.server.store.delete(PODS, NAMESPACE, name, grace_period_seconds=0)


@contextmanager
def fake_cluster(tmp_path: Path) -> Iterator[FakeCluster]:
    server = FakeApiServer(state_dir=tmp_path / "apiserver").start()
    try:
        kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", server.url, None, NAMESPACE)
        install(kubeconfig)
        yield FakeCluster(server, kubeconfig)
    finally:
        server.stop()


def run_spec(
    uid: str, *, task: str = "/alice/train/0", argv: tuple[str, ...] = ("true",), **extra: Any
) -> RunSpec:
    job = task.rsplit("/", 1)[0]
    return RunSpec(
        attempt_uid=uid,
        attempt_number=0,
        job_id=job,
        task_id=task,
        task_index=int(task.rsplit("/", 1)[1]),
        entrypoint=Entrypoint.from_command(*argv),
        resources=ResourceSpec(cpu=0.1, memory="64MB"),
        **extra,
    )


def run(uid: str, spec: RunSpec | None = None) -> DesiredAttempt:
    return DesiredAttempt(attempt_uid=uid, intent="run", spec=spec)


def stop(uid: str) -> DesiredAttempt:
    return DesiredAttempt(attempt_uid=uid, intent="stop", stop_reason="CANCELLED")
