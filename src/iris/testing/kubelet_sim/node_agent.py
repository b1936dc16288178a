"""A kubelet for a real API server: registers Nodes and runs the pods bound to them as local processes.

It plays only the kubelet, over HTTP, against any API server (the real kube-scheduler binds
pods). Per node it keeps the Node object and its Lease fresh, lists and watches pods with
``spec.nodeName=<node>``, runs each pod's init containers and first container with the same
runner, environment and volume code (kubelet_sim/), writes ``pods/status``, completes graceful
deletion with a final ``gracePeriodSeconds=0`` delete, and serves container logs on the kubelet
port. Exec (SPDY) is not served.

    python -m iris.testing.kubelet_sim.node_agent --kubeconfig K --node n0 --node n1 --port P \
        --serving-cert C --serving-key K --client-ca CA --work-dir D
"""

from __future__ import annotations

import argparse
import datetime as dt
import logging
import signal
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from iris.testing.kubelet_sim import pod_status
from iris.testing.kubelet_sim.api_client import KubeApiError, KubeClient
from iris.testing.kubelet_sim.container_env import HOST_ENV_PASSTHROUGH
from iris.testing.kubelet_sim.k8s_types import CONFIGMAPS, ResourceType, utc_timestamp
from iris.testing.kubelet_sim.kubelet_server import KubeletServer
from iris.testing.kubelet_sim.mounts import pod_volumes
from iris.testing.kubelet_sim.nodes import NodeSpec, node_object
from iris.testing.kubelet_sim.plans import pod_plan
from iris.testing.kubelet_sim.pod_logs import ContainerLog, PodLogs
from iris.testing.kubelet_sim.runner import ContainerRunner, StatusUpdate

log = logging.getLogger(__name__)

LEASE_NAMESPACE = "kube-node-lease"
LEASE_DURATION_SECONDS = 40
_TERMINAL = ("Succeeded", "Failed")


def _micro_time() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _pod_path(namespace: str, name: str, sub: str = "") -> str:
    return f"/api/v1/namespaces/{namespace}/pods/{name}" + (f"/{sub}" if sub else "")


class NodeAgent:
    """``start()`` registers the nodes and begins tending their pods; ``stop()`` kills every container."""

    def __init__(
        self,
        client: KubeClient,
        nodes: Sequence[NodeSpec],
        *,
        work_dir: Path,
        kubelet_port: int,
        serving_cert: Path,
        serving_key: Path,
        client_ca: Path,
        heartbeat_seconds: float = 10.0,
        node_status_seconds: float = 60.0,
        watchdog_interval: float = 0.2,
        image_pull_backoff_after: float = 1.0,
    ) -> None:
        self.client = client
        self.node_specs = list(nodes)
        self.work_dir = Path(work_dir)
        self.heartbeat_seconds = heartbeat_seconds
        self.node_status_seconds = node_status_seconds
        self.watchdog_interval = watchdog_interval
        self.image_pull_backoff_after = image_pull_backoff_after
        self.logs = PodLogs(self.work_dir / "logs")
        self.server = KubeletServer(
            kubelet_port,
            self._find_log,
            serving_cert=serving_cert,
            serving_key=serving_key,
            client_ca=client_ca,
        )
        self._lock = threading.RLock()
        self._wakeup = threading.Event()
        self._stopping = threading.Event()
        self._pods: dict[str, dict[str, Any]] = {}  # uid -> newest pod object seen
        self._names: dict[tuple[str, str], str] = {}  # (namespace, name) -> newest uid
        self._runners: dict[str, ContainerRunner] = {}
        self._done: set[str] = set()  # uids whose containers have ended
        self._final_deleted: set[str] = set()
        self._threads: list[threading.Thread] = []

    @property
    def node_names(self) -> list[str]:
        return [spec.name for spec in self.node_specs]

    # ----- lifecycle ------------------------------------------------------------------------------

    def start(self) -> NodeAgent:
        self.work_dir.mkdir(parents=True, exist_ok=True)
        self.server.start()
        version = self.client.get("/version").get("gitVersion", "")
        for spec in self.node_specs:
            self._register_node(spec, version)
        targets: list[tuple[str, Any, tuple[Any, ...]]] = [
            ("node-heartbeat", self._heartbeat_loop, ()),
            ("node-agent", self._tend_loop, ()),
            ("node-agent-watchdog", self._watchdog, ()),
        ]
        targets += [(f"pod-watch-{name}", self._watch_pods, (name,)) for name in self.node_names]
        for name, target, args in targets:
            thread = threading.Thread(target=target, args=args, name=name, daemon=True)
            self._threads.append(thread)
            thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()
        self._wakeup.set()
        with self._lock:
            runners = list(self._runners.values())
        for runner in runners:
            runner.kill()
        for runner in runners:
            runner.join(timeout=5)
        self.server.stop()
        self.logs.finish_all()

    # ----- nodes ----------------------------------------------------------------------------------

    def _node_body(self, spec: NodeSpec, version: str) -> dict[str, Any]:
        node = node_object(spec)
        node["apiVersion"], node["kind"] = "v1", "Node"
        status = node["status"]
        status["daemonEndpoints"] = {"kubeletEndpoint": {"Port": self.server.port}}
        status["nodeInfo"].update(kubeletVersion=version, kubeProxyVersion=version,
                                  containerRuntimeVersion="iris-node-agent://1.0")  # fmt: skip
        status["nodeInfo"]["osImage"] = "iris node agent (local processes)"
        return node

    def _register_node(self, spec: NodeSpec, version: str) -> None:
        body = self._node_body(spec, version)
        try:
            self.client.post("/api/v1/nodes", body)
        except KubeApiError as exc:
            if exc.code != 409:
                raise
        # The node may exist from an earlier run: refresh its status through the subresource.
        self.client.merge_patch(f"/api/v1/nodes/{spec.name}/status", {"status": body["status"]})
        self._renew_lease(spec.name)

    def _renew_lease(self, node: str) -> None:
        path = f"/apis/coordination.k8s.io/v1/namespaces/{LEASE_NAMESPACE}/leases/{node}"
        lease = self.client.try_get(path)
        if lease is None:
            owner = self.client.get(f"/api/v1/nodes/{node}")["metadata"]
            body = {
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {
                    "name": node,
                    "namespace": LEASE_NAMESPACE,
                    "ownerReferences": [
                        {"apiVersion": "v1", "kind": "Node", "name": node, "uid": owner["uid"]}
                    ],
                },
                "spec": {
                    "holderIdentity": node,
                    "leaseDurationSeconds": LEASE_DURATION_SECONDS,
                    "renewTime": _micro_time(),
                },
            }
            self.client.post(f"/apis/coordination.k8s.io/v1/namespaces/{LEASE_NAMESPACE}/leases", body)
            return
        lease["spec"]["renewTime"] = _micro_time()
        self.client.put(path, lease)

    def _post_node_status(self, node: str) -> None:
        current = self.client.get(f"/api/v1/nodes/{node}")
        now = utc_timestamp()
        conditions = current["status"].get("conditions") or []
        for condition in conditions:
            condition["lastHeartbeatTime"] = now
        self.client.merge_patch(f"/api/v1/nodes/{node}/status", {"status": {"conditions": conditions}})

    def _heartbeat_loop(self) -> None:
        last_status = time.monotonic()
        while not self._stopping.wait(self.heartbeat_seconds):
            post_status = time.monotonic() - last_status >= self.node_status_seconds
            for node in self.node_names:
                try:
                    self._renew_lease(node)
                    if post_status:
                        self._post_node_status(node)
                except Exception as exc:  # keep beating; the next round retries
                    log.warning("heartbeat for %s failed: %s", node, exc)
            if post_status:
                last_status = time.monotonic()

    # ----- pods: list + watch per node ------------------------------------------------------------

    def _watch_pods(self, node: str) -> None:
        selector = {"fieldSelector": f"spec.nodeName={node}"}
        while not self._stopping.is_set():
            try:
                listing = self.client.get("/api/v1/pods", **selector)
                seen = set()
                for pod in listing.get("items") or []:
                    seen.add(pod["metadata"]["uid"])
                    self._observe(pod)
                self._forget_missing(node, seen)
                version = listing["metadata"]["resourceVersion"]
                while not self._stopping.is_set():
                    for event in self.client.watch("/api/v1/pods", {**selector, "resourceVersion": version}):
                        kind, obj = event.get("type"), event.get("object") or {}
                        if kind == "ERROR":
                            raise KubeApiError(int(obj.get("code") or 500), str(obj.get("message")))
                        version = obj.get("metadata", {}).get("resourceVersion", version)
                        if kind == "BOOKMARK":
                            continue
                        if kind == "DELETED":
                            self._deleted(obj)
                        else:
                            self._observe(obj)
            except Exception as exc:
                if self._stopping.is_set():
                    return
                log.info("pod watch for %s restarts: %s", node, exc)
                self._stopping.wait(0.5)

    def _observe(self, pod: dict[str, Any]) -> None:
        meta = pod["metadata"]
        with self._lock:
            self._pods[meta["uid"]] = pod
            self._names[(meta["namespace"], meta["name"])] = meta["uid"]
        self._wakeup.set()

    def _deleted(self, pod: dict[str, Any]) -> None:
        uid = pod["metadata"]["uid"]
        with self._lock:
            self._pods.pop(uid, None)
            runner = self._runners.get(uid)
        if runner is not None:
            runner.kill()  # force-deleted: no grace left
        self._wakeup.set()

    def _forget_missing(self, node: str, present: set[str]) -> None:
        with self._lock:
            gone = [
                pod
                for uid, pod in self._pods.items()
                if uid not in present and (pod.get("spec") or {}).get("nodeName") == node
            ]
        for pod in gone:
            self._deleted(pod)

    # ----- tending --------------------------------------------------------------------------------

    def _tend_loop(self) -> None:
        while not self._stopping.is_set():
            self._wakeup.wait(timeout=1.0)
            self._wakeup.clear()
            if self._stopping.is_set():
                return
            with self._lock:
                pods = list(self._pods.values())
            for pod in pods:
                try:
                    self._tend(pod)
                except KubeApiError as exc:
                    log.warning(
                        "tending %s/%s: %s", pod["metadata"]["namespace"], pod["metadata"]["name"], exc
                    )
                except Exception:
                    log.exception(
                        "tending %s/%s failed", pod["metadata"]["namespace"], pod["metadata"]["name"]
                    )

    def _watchdog(self) -> None:
        while not self._stopping.wait(self.watchdog_interval):
            with self._lock:
                runners = list(self._runners.values())
            now = time.monotonic()
            for runner in runners:
                runner.check(now)

    def _tend(self, pod: dict[str, Any]) -> None:
        meta = pod["metadata"]
        uid = meta["uid"]
        with self._lock:
            runner = self._runners.get(uid)
            done = uid in self._done
        if meta.get("deletionTimestamp"):
            if runner is not None:
                runner.terminate(float(meta.get("deletionGracePeriodSeconds") or 0))
            elif uid not in self._final_deleted:
                # Containers are gone: the kubelet's final delete removes the object (or, with
                # finalizers, leaves it to them).
                self._final_deleted.add(uid)
                try:
                    self.client.delete(
                        _pod_path(meta["namespace"], meta["name"]),
                        {"gracePeriodSeconds": 0, "preconditions": {"uid": uid}},
                    )
                except KubeApiError as exc:
                    if exc.code not in (404, 409):
                        self._final_deleted.discard(uid)
                        raise
            return
        phase = (pod.get("status") or {}).get("phase")
        if runner is None and not done and phase not in _TERMINAL:
            self._start(pod)

    def _start(self, pod: dict[str, Any]) -> None:
        meta = pod["metadata"]
        uid = meta["uid"]
        start_time = utc_timestamp()
        self._write_status(pod, lambda status, current: pod_status.scheduled(status, current, start_time))
        cwd = self.work_dir / "pods" / uid
        cwd.mkdir(parents=True, exist_ok=True)
        volumes = {**pod_volumes(pod, cwd), **self._projected_volumes(pod, cwd)}
        plan = pod_plan(
            pod,
            cwd,
            volumes,
            self._lookup,
            host_env_passthrough=HOST_ENV_PASSTHROUGH,
            image_pull_backoff_after=self.image_pull_backoff_after,
        )
        container = pod["spec"]["containers"][0]["name"]
        runner = ContainerRunner(
            (meta["namespace"], meta["name"]),
            plan,
            self.logs.open(uid, container),
            lambda update: self._write_status(pod, update),
            self._container_ended,
        )
        with self._lock:
            self._runners[uid] = runner
        runner.start()

    def _container_ended(self, runner: ContainerRunner) -> None:
        with self._lock:
            for uid, candidate in list(self._runners.items()):
                if candidate is runner:
                    del self._runners[uid]
                    self._done.add(uid)
        self._wakeup.set()

    def _projected_volumes(self, pod: dict[str, Any], pod_dir: Path) -> dict[str, Path]:
        """Projected volumes (the service-account token volume) written as files in the pod's folder."""
        out: dict[str, Path] = {}
        meta, spec = pod["metadata"], pod.get("spec") or {}
        for volume in spec.get("volumes") or []:
            projected = volume.get("projected")
            if projected is None:
                continue
            folder = pod_dir / "volumes" / volume["name"]
            folder.mkdir(parents=True, exist_ok=True)
            for source in projected.get("sources") or []:
                try:
                    self._write_projection(pod, source, folder)
                except KubeApiError as exc:
                    log.warning("projected volume %s of %s: %s", volume["name"], meta["name"], exc)
            out[volume["name"]] = folder
        return out

    def _write_projection(self, pod: dict[str, Any], source: dict[str, Any], folder: Path) -> None:
        meta = pod["metadata"]
        if "serviceAccountToken" in source:
            token_source = source["serviceAccountToken"]
            account = (pod.get("spec") or {}).get("serviceAccountName") or "default"
            request: dict[str, Any] = {
                "apiVersion": "authentication.k8s.io/v1",
                "kind": "TokenRequest",
                "spec": {
                    "expirationSeconds": int(token_source.get("expirationSeconds") or 3607),
                    "boundObjectRef": {
                        "apiVersion": "v1",
                        "kind": "Pod",
                        "name": meta["name"],
                        "uid": meta["uid"],
                    },
                },
            }
            if token_source.get("audience"):
                request["spec"]["audiences"] = [token_source["audience"]]
            answer = self.client.post(
                f"/api/v1/namespaces/{meta['namespace']}/serviceaccounts/{account}/token", request
            )
            (folder / token_source.get("path", "token")).write_text(answer["status"]["token"])
        elif "configMap" in source:
            ref = source["configMap"]
            config_map = self._lookup(CONFIGMAPS, meta["namespace"], ref.get("name", ""))
            data = (config_map or {}).get("data") or {}
            items = ref.get("items") or [{"key": k, "path": k} for k in data]
            for item in items:
                if item["key"] in data:
                    (folder / item["path"]).write_text(data[item["key"]])
        elif "downwardAPI" in source:
            for item in source["downwardAPI"].get("items") or []:
                field = (item.get("fieldRef") or {}).get("fieldPath")
                if field == "metadata.namespace":
                    (folder / item["path"]).write_text(meta["namespace"])
                elif field == "metadata.name":
                    (folder / item["path"]).write_text(meta["name"])

    def _lookup(self, resource: ResourceType, namespace: str, name: str) -> dict[str, Any] | None:
        return self.client.try_get(f"/api/v1/namespaces/{namespace}/{resource.plural}/{name}")

    def _write_status(self, pod: dict[str, Any], update: StatusUpdate) -> None:
        """Read-modify-write of ``pods/status``, guarded by resourceVersion; retried on conflict."""
        meta = pod["metadata"]
        path = _pod_path(meta["namespace"], meta["name"])
        for _attempt in range(20):
            current = self.client.try_get(path)
            if current is None or current["metadata"]["uid"] != meta["uid"]:
                return  # gone, or a new pod took the name
            current["status"] = update(current.get("status") or {}, current)
            try:
                self.client.put(path + "/status", current)
                return
            except KubeApiError as exc:
                if exc.code == 404:
                    return
                if exc.code != 409:
                    raise
        log.warning("status of %s/%s: gave up after repeated conflicts", meta["namespace"], meta["name"])

    def _find_log(self, namespace: str, pod: str, container: str) -> ContainerLog | None:
        with self._lock:
            uid = self._names.get((namespace, pod))
            known = uid is not None and (uid in self._pods or uid in self._done)
        if uid is None or not known:
            return None
        found = self.logs.get(uid, container)
        if found is None:
            return self.logs.open(uid, container)  # a container that has not written (or not run) yet
        return found


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--kubeconfig", required=True, type=Path)
    parser.add_argument("--node", action="append", required=True, help="node name (repeatable)")
    parser.add_argument("--cpu", default="4")
    parser.add_argument("--memory", default="8Gi")
    parser.add_argument("--port", type=int, default=0, help="kubelet port (logs)")
    parser.add_argument("--serving-cert", required=True, type=Path)
    parser.add_argument("--serving-key", required=True, type=Path)
    parser.add_argument("--client-ca", required=True, type=Path, help="CA of the API server's kubelet client")
    parser.add_argument("--work-dir", required=True, type=Path)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)
    client = KubeClient(args.kubeconfig)
    agent = NodeAgent(
        client,
        [NodeSpec(name=name, cpu=args.cpu, memory=args.memory) for name in args.node],
        work_dir=args.work_dir,
        kubelet_port=args.port,
        serving_cert=args.serving_cert,
        serving_key=args.serving_key,
        client_ca=args.client_ca,
    )
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    agent.start()
    log.info("node agent ready: nodes %s, kubelet port %d", ", ".join(agent.node_names), agent.server.port)
    stop.wait()
    agent.stop()
    client.close()


if __name__ == "__main__":
    main()
