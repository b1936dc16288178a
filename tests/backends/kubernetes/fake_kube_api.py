"""An in-memory fake of the backend's seam, ``iris.cluster.backends.kubernetes.api.KubeApi``.

Unit tests of :class:`KubernetesBackend` pass ``api_factory=fake.factory``: every call the backend
makes lands here, and the test plays kube-scheduler, the kubelet and Kueue by editing the objects
(``set_status``, ``finish_deletion``, ``write_log``, ``add_event``, ``workloads``). ``writes``
records every mutating call, so "this round wrote nothing" is exactly checkable.

Only the API's observable contract is modelled (409 on an existing name, 404 when absent,
graceful deletion of a pod bound to a node, the PriorityClass admission, label selection); what
the real components do with it is tested against the real control plane (marker ``real_k8s``).
"""

from __future__ import annotations

import copy
import itertools
import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any

from iris.cluster.backends.kubernetes.api import ExecResult, KubeApiError
from iris.cluster.backends.kubernetes.config import KubernetesBackendConfig
from iris.cluster.backends.kubernetes.manifests import render_manifests

Admission = Callable[[dict[str, Any]], None]


def utc_timestamp(at: float | None = None) -> str:
    moment = datetime.fromtimestamp(time.time() if at is None else at, tz=UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def _priority_classes() -> dict[str, int]:
    """The bands' PriorityClasses exactly as `iris k8s manifests` installs them."""
    return {
        o["metadata"]["name"]: int(o["value"])
        for o in render_manifests(kueue_api_version="v1beta1")
        if o["kind"] == "PriorityClass"
    }


class _Log:
    def __init__(self) -> None:
        self.lines: list[str] = []
        self.finished = False


class FakeKubeApi:
    """One namespace of pods, Secrets, events, nodes and Kueue Workloads, shared by every
    connection the backend opens (``factory`` returns this same object)."""

    server = "https://fake-kube-api.invalid"

    def __init__(self, namespace: str = "iris") -> None:
        self.namespace = namespace
        self.pods: dict[str, dict[str, Any]] = {}
        self.secrets: dict[str, dict[str, Any]] = {}
        self.events: list[dict[str, Any]] = []
        self.nodes: list[dict[str, Any]] = [{"metadata": {"name": "node-1"}, "status": {}}]
        self.workloads: list[dict[str, Any]] = []
        self.writes: list[tuple[str, str]] = []
        self.admission: list[Admission] = []
        self.exec_handler: Callable[[str, str, list[str], float], ExecResult] | None = None
        self.priority_classes = _priority_classes()
        self.unreachable = False
        self.closed = 0
        self._logs: dict[str, _Log] = {}
        self._uids = itertools.count(1)
        self._version = itertools.count(1)
        self._changed = threading.Condition()
        self._history: list[tuple[str, dict[str, Any]]] = []

    def factory(self, config: KubernetesBackendConfig) -> FakeKubeApi:
        return self

    # ------------------------------------------------------------ the test's side

    def set_status(self, name: str, status: dict[str, Any], *, node: str | None = None) -> None:
        """Play kube-scheduler (``node``) and the kubelet (``status``) for one pod."""
        pod = self.pods[name]
        if node is not None:
            pod["spec"]["nodeName"] = node
        pod["status"] = copy.deepcopy(status)
        self._touch("MODIFIED", pod)

    def finish_deletion(self, name: str) -> None:
        """Play the kubelet confirming a graceful deletion: the pod goes."""
        self._remove(name)

    def remove_pod(self, name: str) -> None:
        """The pod vanishes at once (``kubectl delete --grace-period=0 --force``, or Kueue)."""
        self._remove(name)

    def write_log(self, name: str, line: str) -> None:
        log = self._logs.setdefault(name, _Log())
        with self._changed:
            log.lines.append(f"{utc_timestamp()} {line}")
            self._changed.notify_all()

    def finish_log(self, name: str) -> None:
        with self._changed:
            self._logs.setdefault(name, _Log()).finished = True
            self._changed.notify_all()

    def add_event(self, pod: str, reason: str, message: str) -> None:
        self.events.append(
            {
                "metadata": {"name": f"{pod}.{len(self.events)}", "namespace": self.namespace},
                "involvedObject": {"kind": "Pod", "name": pod},
                "reason": reason,
                "message": message,
                "type": "Normal",
                "lastTimestamp": utc_timestamp(),
            }
        )

    # ------------------------------------------------------------ KubeApi: pods

    def close(self) -> None:
        self.closed += 1

    def list_pods(self, labels: dict[str, str]) -> list[dict[str, Any]]:
        self._reachable()
        return [copy.deepcopy(p) for p in self.pods.values() if _matches(p, labels)]

    def watch_pods(
        self,
        labels: dict[str, str],
        *,
        should_stop: Callable[[], bool],
        server_timeout_s: int = 60,
        resource_version: str | None = None,
    ) -> Iterator[tuple[str, dict[str, Any]]]:
        seen = len(self._history)
        deadline = time.monotonic() + server_timeout_s
        while not should_stop() and time.monotonic() < deadline:
            with self._changed:
                self._changed.wait_for(lambda s=seen: len(self._history) > s, timeout=0.05)
                fresh = self._history[seen:]
                seen = len(self._history)
            for kind, pod in fresh:
                if _matches(pod, labels):
                    yield kind, copy.deepcopy(pod)

    def create_pod(self, manifest: dict[str, Any]) -> dict[str, Any]:
        self._reachable()
        pod = copy.deepcopy(manifest)
        name = pod["metadata"]["name"]
        self.writes.append(("create pod", name))
        for check in self.admission:
            check(pod)
        if name in self.pods:
            raise KubeApiError(409, "AlreadyExists", f'pods "{name}" already exists')
        spec = pod.setdefault("spec", {})
        band = spec.get("priorityClassName")
        if band is not None:
            if band not in self.priority_classes:
                raise KubeApiError(
                    403,
                    "Forbidden",
                    f"pods {name!r} is forbidden: no PriorityClass with name {band} was found",
                )
            spec["priority"] = self.priority_classes[band]
        meta = pod["metadata"]
        meta.update(
            uid=f"uid-{next(self._uids)}", creationTimestamp=utc_timestamp(), namespace=self.namespace
        )
        pod.setdefault("status", {"phase": "Pending"})
        self.pods[name] = pod
        self._touch("ADDED", pod)
        return copy.deepcopy(pod)

    def get_pod(self, name: str) -> dict[str, Any] | None:
        self._reachable()
        pod = self.pods.get(name)
        return copy.deepcopy(pod) if pod is not None else None

    def delete_pod(self, name: str) -> bool:
        """A pod on a node ends gracefully (the kubelet confirms, ``finish_deletion``); an
        unscheduled or finished one goes at once."""
        self._reachable()
        self.writes.append(("delete pod", name))
        pod = self.pods.get(name)
        if pod is None:
            return False
        phase = (pod.get("status") or {}).get("phase")
        if pod["spec"].get("nodeName") and phase not in ("Succeeded", "Failed"):
            pod["metadata"].setdefault("deletionTimestamp", utc_timestamp())
            self._touch("MODIFIED", pod)
        else:
            self._remove(name)
        return True

    def pod_log(self, name: str, container: str) -> list[str]:
        self._log_readable(name, container)
        return list(self._logs.get(name, _Log()).lines)

    def follow_pod_log(self, name: str, container: str) -> Iterator[str]:
        self._log_readable(name, container)
        log = self._logs.setdefault(name, _Log())
        sent = 0
        while True:
            with self._changed:
                self._changed.wait_for(lambda s=sent: len(log.lines) > s or log.finished, timeout=0.05)
                fresh, done = log.lines[sent:], log.finished
            sent += len(fresh)
            yield from fresh
            if done and sent == len(log.lines):
                return

    def exec(self, name: str, container: str, argv: list[str], timeout_s: float) -> ExecResult:
        self._reachable()
        if name not in self.pods:
            raise KubeApiError(404, "NotFound", f'pods "{name}" not found')
        if self.exec_handler is None:
            raise KubeApiError(0, "WebSocketError", "exec is not served here")
        return self.exec_handler(name, container, argv, timeout_s)

    # ------------------------------------------------------------ KubeApi: secrets

    def put_secret(self, manifest: dict[str, Any]) -> None:
        self._reachable()
        name = manifest["metadata"]["name"]
        self.writes.append(("put secret", name))
        if name in self.secrets:
            self.secrets[name]["data"] = copy.deepcopy(manifest["data"])
        else:
            self.secrets[name] = copy.deepcopy(manifest)

    def own_secret(self, name: str, pod: dict[str, Any]) -> None:
        self._reachable()
        self.writes.append(("own secret", name))
        if name not in self.secrets:
            raise KubeApiError(404, "NotFound", f'secrets "{name}" not found')
        meta = pod.get("metadata") or {}
        owner = {"apiVersion": "v1", "kind": "Pod", "name": meta.get("name", ""), "uid": meta.get("uid", "")}
        self.secrets[name]["metadata"]["ownerReferences"] = [{**owner, "blockOwnerDeletion": False}]

    def get_secret(self, name: str) -> dict[str, Any] | None:
        self._reachable()
        secret = self.secrets.get(name)
        return copy.deepcopy(secret) if secret is not None else None

    def delete_secret(self, name: str) -> bool:
        self._reachable()
        self.writes.append(("delete secret", name))
        return self.secrets.pop(name, None) is not None

    # ------------------------------------------------------------ KubeApi: read-only context

    def list_pod_events(self, pod: str) -> list[dict[str, Any]]:
        self._reachable()
        return [copy.deepcopy(e) for e in self.events if e["involvedObject"]["name"] == pod]

    def list_events_with_reason(self, reason: str) -> list[dict[str, Any]]:
        self._reachable()
        return [copy.deepcopy(e) for e in self.events if e["reason"] == reason]

    def list_nodes(self) -> list[dict[str, Any]]:
        self._reachable()
        return copy.deepcopy(self.nodes)

    def list_workloads(self) -> list[dict[str, Any]]:
        self._reachable()
        return copy.deepcopy(self.workloads)

    # ------------------------------------------------------------ internals

    def _reachable(self) -> None:
        if self.unreachable:
            raise KubeApiError(0, "ConnectError", "Kubernetes API unreachable: connection refused")

    def _log_readable(self, name: str, container: str) -> None:
        """The API answers 400 while the container has not started, 404 for no such pod."""
        self._reachable()
        pod = self.pods.get(name)
        if pod is None:
            raise KubeApiError(404, "NotFound", f'pods "{name}" not found')
        started = any(
            s.get("name") == container
            and ("running" in s.get("state", {}) or "terminated" in s.get("state", {}))
            for s in (pod.get("status") or {}).get("containerStatuses") or []
        )
        if not started and (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed"):
            raise KubeApiError(
                400, "BadRequest", f'container "{container}" in pod "{name}" is waiting to start'
            )

    def _remove(self, name: str) -> None:
        pod = self.pods.pop(name, None)
        if pod is not None:
            self._touch("DELETED", pod)

    def _touch(self, kind: str, pod: dict[str, Any]) -> None:
        pod["metadata"]["resourceVersion"] = str(next(self._version))
        with self._changed:
            self._history.append((kind, copy.deepcopy(pod)))
            self._changed.notify_all()


def _matches(pod: dict[str, Any], labels: dict[str, str]) -> bool:
    have = (pod.get("metadata") or {}).get("labels") or {}
    return all(have.get(k) == v for k, v in labels.items())
