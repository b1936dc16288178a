"""KubeletSimulator: schedules ungated pods onto fake nodes and runs them as local processes.

It plays kube-scheduler (bind or explain why not), the kubelet (run the first container,
report Pending/ContainerCreating -> Running -> Succeeded/Failed, serve logs, kill the process
group on deletion and then finish the deletion) and the pod garbage collector of
kube-controller-manager (a pod deleted before it got a node is marked Failed, then force-deleted;
the real one does it every 20 s, this one at once), reacting to in-process change feeds.
"""

from __future__ import annotations

import logging
import subprocess
import threading
import time
from collections.abc import Sequence
from fractions import Fraction
from pathlib import Path
from typing import Any

from iris.testing.conditions import get_condition
from iris.testing.events import record_pod_event
from iris.testing.fake_apiserver import NODES, PODS, ApiError, FakeApiServer, ResourceType, utc_timestamp
from iris.testing.informer import Informer
from iris.testing.k8s_quantity import pod_requests
from iris.testing.kubelet_sim import pod_status
from iris.testing.kubelet_sim.mounts import pod_volumes
from iris.testing.kubelet_sim.nodes import NodeSpec, node_object
from iris.testing.kubelet_sim.plans import pod_plan
from iris.testing.kubelet_sim.runner import ContainerPlan, ContainerRunner, StatusUpdate
from iris.testing.kubelet_sim.scheduling import node_info, schedule_pod

log = logging.getLogger(__name__)

HOST_ENV_PASSTHROUGH = ("PATH", "LANG", "LC_ALL", "TZ", "PYTHONPATH", "VIRTUAL_ENV", "TMPDIR")
_TERMINAL = ("Succeeded", "Failed")
PodKey = tuple[str, str]


def _is_terminal(pod: dict[str, Any]) -> bool:
    return (pod.get("status") or {}).get("phase") in _TERMINAL


class KubeletSimulator:
    """Fake nodes plus a scheduler and kubelet for them. ``start()`` / ``stop()``."""

    def __init__(
        self,
        server: FakeApiServer,
        nodes: Sequence[NodeSpec],
        *,
        work_dir: Path,
        host_env_passthrough: Sequence[str] = HOST_ENV_PASSTHROUGH,
        watchdog_interval: float = 0.2,
        image_pull_backoff_after: float = 1.0,
    ) -> None:
        self.server = server
        self.node_specs = list(nodes)
        self.work_dir = Path(work_dir)
        self.host_env_passthrough = tuple(host_env_passthrough)
        self.watchdog_interval = watchdog_interval
        self.image_pull_backoff_after = image_pull_backoff_after
        self._lock = threading.RLock()
        self._wakeup = threading.Event()
        self._stopping = threading.Event()
        self._runners: dict[str, ContainerRunner] = {}  # pod uid -> runner
        self._done: set[str] = set()  # pod uids whose container has ended
        self._informers: list[Informer] = []
        self._threads = [
            threading.Thread(target=self._run, name="kubelet-sim", daemon=True),
            threading.Thread(target=self._watchdog, name="kubelet-sim-watchdog", daemon=True),
        ]

    @property
    def node_names(self) -> list[str]:
        return [spec.name for spec in self.node_specs]

    def start(self) -> KubeletSimulator:
        self.work_dir.mkdir(parents=True, exist_ok=True)
        for spec in self.node_specs:
            self.register_node(spec)
        self._pods = Informer(self.server, PODS, self._wakeup)
        self._nodes = Informer(self.server, NODES, self._wakeup)
        self._informers = [self._pods, self._nodes]
        self.server.exec_handler = self.exec_in_pod
        for thread in self._threads:
            thread.start()
        return self

    def exec_in_pod(
        self, pod: dict[str, Any], container: str, argv: list[str], stdin: bool
    ) -> subprocess.Popen[bytes]:
        """Run ``argv`` beside a running container: same working directory and environment."""
        with self._lock:
            runner = self._runners.get(pod["metadata"]["uid"])
        if runner is None or runner.pid is None:
            raise ApiError(
                400, "BadRequest", f'unable to upgrade connection: container not found ("{container}")'
            )
        plan = runner.plan
        return subprocess.Popen(
            argv,
            cwd=plan.cwd,
            env=plan.env,
            stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )

    def register_node(self, spec: NodeSpec) -> None:
        """Create (or refresh) the Node object for ``spec``; it becomes schedulable at once."""
        with self._lock:
            if spec not in self.node_specs:
                self.node_specs.append(spec)
        node = node_object(spec)
        store = self.server.store
        try:
            store.create(NODES, None, node)
        except ApiError as exc:
            if exc.code != 409:
                raise
            store.update(
                NODES, None, spec.name, lambda cur: {**cur, "status": node["status"]}, subresource="status"
            )
        self._wakeup.set()

    def stop(self) -> None:
        """Stop reacting and kill every container process."""
        self._stopping.set()
        self._wakeup.set()
        if self.server.exec_handler == self.exec_in_pod:
            self.server.exec_handler = None
        for thread in self._threads:
            if thread.is_alive():
                thread.join(timeout=5)
        with self._lock:
            runners = list(self._runners.values())
        for runner in runners:
            runner.kill()
        for runner in runners:
            runner.join(timeout=5)
        for informer in self._informers:
            informer.close()

    def pid_of(self, namespace: str, name: str) -> int | None:
        """The process id of a running pod's container (None if not running)."""
        with self._lock:
            for runner in self._runners.values():
                if runner.pod_key == (namespace, name):
                    return runner.pid
        return None

    # ----- loops --------------------------------------------------------------------------------

    def _run(self) -> None:
        while not self._stopping.is_set():
            self._wakeup.wait(timeout=1.0)
            self._wakeup.clear()
            if self._stopping.is_set():
                return
            try:
                self.run_cycle()
            except ApiError as exc:
                log.warning("kubelet-sim cycle: %s", exc.message)
                self._stopping.wait(0.05)
                self._wakeup.set()
            except Exception:
                log.exception("kubelet-sim cycle failed")
                self._stopping.wait(0.5)
                self._wakeup.set()

    def _watchdog(self) -> None:
        while not self._stopping.wait(self.watchdog_interval):
            with self._lock:
                runners = list(self._runners.values())
            now = time.monotonic()
            for runner in runners:
                runner.check(now)

    def run_cycle(self) -> None:
        with self._lock:
            for event in self._pods.sync():
                uid = event.object["metadata"].get("uid", "")
                if event.type == "DELETED" and uid in self._runners:
                    self._runners[uid].kill()  # force-deleted: no grace left
            self._nodes.sync()
            ours = set(self.node_names)
            nodes = [node_info(n) for n in self._nodes.cache.values() if n["metadata"]["name"] in ours]
            used: dict[str, dict[str, Fraction]] = {}
            pending: list[dict[str, Any]] = []
            live_uids = set()
            for pod in self._pods.cache.values():
                meta, spec = pod["metadata"], pod.get("spec") or {}
                live_uids.add(meta["uid"])
                node = spec.get("nodeName")
                if node:
                    if node in ours:
                        self._tend(pod)
                    if not _is_terminal(pod):
                        node_used = used.setdefault(node, {})
                        for resource, amount in {**_safe_requests(pod), "pods": Fraction(1)}.items():
                            node_used[resource] = node_used.get(resource, Fraction(0)) + amount
                elif meta.get("deletionTimestamp"):
                    self._collect_unscheduled(pod)
                elif not spec.get("schedulingGates") and not _is_terminal(pod):
                    if spec.get("schedulerName", "default-scheduler") == "default-scheduler":
                        pending.append(pod)
            self._done &= live_uids
            pending.sort(
                key=lambda p: (
                    -int((p.get("spec") or {}).get("priority") or 0),
                    int(p["metadata"]["resourceVersion"]),
                )
            )
            for pod in pending:
                self._schedule(pod, nodes, used)

    # ----- scheduler ----------------------------------------------------------------------------

    def _schedule(self, pod: dict[str, Any], nodes: list[Any], used: dict[str, dict[str, Fraction]]) -> None:
        meta = pod["metadata"]
        try:
            placement = schedule_pod(pod, nodes, used)
        except ValueError as exc:
            placement = None
            message = f"invalid resource request: {exc}"
        else:
            message = placement.message
        store = self.server.store
        if placement is not None and placement.node is not None:
            try:
                store.bind_pod(meta["namespace"], meta["name"], placement.node)
            except ApiError as exc:
                if exc.code in (404, 409, 403):
                    return
                raise
            node_used = used.setdefault(placement.node, {})
            for resource, amount in {**_safe_requests(pod), "pods": Fraction(1)}.items():
                node_used[resource] = node_used.get(resource, Fraction(0)) + amount
            start_time = utc_timestamp()
            self._write_status(pod, lambda status, current: pod_status.scheduled(status, current, start_time))
            self._start_container(pod)
            return
        current = get_condition(pod, "PodScheduled")
        if current is None or current.get("reason") != "Unschedulable" or current.get("message") != message:
            self._write_status(pod, lambda status, _current: pod_status.unschedulable(status, message))
            record_pod_event(
                self.server.store, pod, "Warning", "FailedScheduling", message, "default-scheduler"
            )

    # ----- kubelet ------------------------------------------------------------------------------

    def _tend(self, pod: dict[str, Any]) -> None:
        """Converge one pod bound to one of our nodes: start it, stop it, or finish its deletion."""
        meta = pod["metadata"]
        uid = meta["uid"]
        runner = self._runners.get(uid)
        if meta.get("deletionTimestamp"):
            if runner is not None:
                runner.terminate(float(meta.get("deletionGracePeriodSeconds") or 0))
            elif meta.get("deletionGracePeriodSeconds"):
                try:  # the container is gone: complete the graceful deletion
                    self.server.store.delete(
                        PODS, meta["namespace"], meta["name"], grace_period_seconds=0, precondition_uid=uid
                    )
                except ApiError as exc:
                    if exc.code not in (404, 409):
                        raise
            return
        if runner is None and uid not in self._done and not _is_terminal(pod):
            phase = (pod.get("status") or {}).get("phase")
            if phase != "Pending" or not (pod.get("status") or {}).get("containerStatuses"):
                start_time = utc_timestamp()
                self._write_status(
                    pod, lambda status, current: pod_status.scheduled(status, current, start_time)
                )
            self._start_container(pod)

    def _start_container(self, pod: dict[str, Any]) -> None:
        meta = pod["metadata"]
        uid = meta["uid"]
        cwd = self.work_dir / uid
        cwd.mkdir(parents=True, exist_ok=True)
        plan = self._plan(pod, cwd)
        container_name = pod["spec"]["containers"][0]["name"]
        runner = ContainerRunner(
            (meta["namespace"], meta["name"]),
            plan,
            self.server.pod_logs.open(uid, container_name),
            lambda update: self._write_status(pod, update),
            self._container_ended,
        )
        self._runners[uid] = runner
        runner.start()

    def _container_ended(self, runner: ContainerRunner) -> None:
        with self._lock:
            for uid, candidate in list(self._runners.items()):
                if candidate is runner:
                    del self._runners[uid]
                    self._done.add(uid)
        self._wakeup.set()

    def _plan(self, pod: dict[str, Any], cwd: Path) -> ContainerPlan:
        return pod_plan(
            pod,
            cwd,
            pod_volumes(pod, cwd),
            self._lookup,
            host_env_passthrough=self.host_env_passthrough,
            image_pull_backoff_after=self.image_pull_backoff_after,
        )

    def _lookup(self, resource: ResourceType, namespace: str, name: str) -> dict[str, Any] | None:
        return self.server.store.try_get(resource, namespace, name)

    def _collect_unscheduled(self, pod: dict[str, Any]) -> None:
        """Pod GC's gcUnscheduledTerminating: phase Failed (no condition), then delete with grace 0.

        A finalizer (Kueue's) still holds the pod after that, until its owner lets go."""
        meta = pod["metadata"]
        if not _is_terminal(pod):
            self._write_status(pod, lambda status, _current: {**status, "phase": "Failed"})
        if meta.get("deletionGracePeriodSeconds"):
            try:
                self.server.store.delete(
                    PODS,
                    meta["namespace"],
                    meta["name"],
                    grace_period_seconds=0,
                    precondition_uid=meta["uid"],
                )
            except ApiError as exc:
                if exc.code not in (404, 409):
                    raise

    def _write_status(self, pod: dict[str, Any], update: StatusUpdate) -> None:
        meta = pod["metadata"]
        uid = meta["uid"]

        def mutate(current: dict[str, Any]) -> dict[str, Any]:
            if current["metadata"]["uid"] != uid:  # a new pod took the name: not ours to touch
                return current
            current["status"] = update(current.get("status") or {}, current)
            return current

        try:
            self.server.store.update(PODS, meta["namespace"], meta["name"], mutate, subresource="status")
        except ApiError as exc:
            if exc.code != 404:
                raise


def _safe_requests(pod: dict[str, Any]) -> dict[str, Fraction]:
    try:
        return pod_requests(pod)
    except ValueError:
        return {}
