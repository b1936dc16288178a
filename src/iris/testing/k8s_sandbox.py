"""A local Kubernetes "cluster": fake API server + Kueue + kubelet simulators in one process.

``start_sandbox(state_dir)`` returns a running ``Sandbox`` (also a context manager). From the
command line, ``python -m iris.testing.k8s_sandbox --state-dir D [--port P] [--ready-file F]``
runs one in the foreground until SIGTERM/SIGINT and writes ``{"server_url", "kubeconfig",
"token", "namespace", "pid"}`` to the ready file once it accepts requests.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import signal
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any

from iris.testing.fake_apiserver import (
    CLUSTER_QUEUES,
    LOCAL_QUEUES,
    NAMESPACES,
    PRIORITY_CLASSES,
    RESOURCE_FLAVORS,
    WORKLOAD_PRIORITY_CLASSES,
    FakeApiServer,
)
from iris.testing.k8s_quantity import format_quantity, parse_quantity
from iris.testing.kubelet_sim import KubeletSimulator, NodeSpec
from iris.testing.kueue_sim import KueueSimulator

FLAVOR_NAME = "default-flavor"
CLUSTER_QUEUE_NAME = "iris-cluster-queue"
LOCAL_QUEUE_NAME = "iris"
NODE_EPHEMERAL_STORAGE = "100Gi"


@dataclass
class Sandbox:
    server: FakeApiServer
    kueue: KueueSimulator
    kubelet: KubeletSimulator
    kubeconfig_path: Path
    token: str
    namespace: str
    state_dir: Path
    local_queue: str = LOCAL_QUEUE_NAME
    cluster_queue: str = CLUSTER_QUEUE_NAME

    @property
    def server_url(self) -> str:
        return self.server.url

    def stop(self) -> None:
        """Stop the simulators (killing every pod process) and the server."""
        self.kubelet.stop()
        self.kueue.stop()
        self.server.stop()

    def __enter__(self) -> Sandbox:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def default_quota(nodes: int, cpu_per_node: str, memory_per_node: str, gpus_per_node: int) -> dict[str, str]:
    """The whole fleet's capacity: Kueue then never admits more than the nodes can hold."""
    total = {
        "cpu": parse_quantity(cpu_per_node) * nodes,
        "memory": parse_quantity(memory_per_node) * nodes,
        "ephemeral-storage": parse_quantity(NODE_EPHEMERAL_STORAGE) * nodes,
        "nvidia.com/gpu": Fraction(gpus_per_node * nodes),
        # Covered, as `iris k8s manifests` covers every device resource (no TPU nodes here).
        "google.com/tpu": Fraction(0),
    }
    return {name: format_quantity(amount) for name, amount in total.items()}


def cluster_queue_object(quota: Mapping[str, str | int]) -> dict:
    return {
        "metadata": {"name": CLUSTER_QUEUE_NAME},
        "spec": {
            "namespaceSelector": {},
            "queueingStrategy": "BestEffortFIFO",
            "preemption": {"withinClusterQueue": "LowerPriority", "reclaimWithinCohort": "Never"},
            "resourceGroups": [
                {
                    "coveredResources": list(quota),
                    "flavors": [
                        {
                            "name": FLAVOR_NAME,
                            "resources": [{"name": r, "nominalQuota": str(q)} for r, q in quota.items()],
                        }
                    ],
                }
            ],
        },
    }


def _apply_priority_classes(store: Any) -> None:
    """The band priority classes exactly as `iris k8s manifests` renders them for an operator."""
    from iris.cluster.backends.kubernetes.manifests import render_manifests

    by_kind = {"PriorityClass": PRIORITY_CLASSES, "WorkloadPriorityClass": WORKLOAD_PRIORITY_CLASSES}
    for obj in render_manifests(kueue_api_version="v1beta1"):
        resource = by_kind.get(obj["kind"])
        if resource is not None:
            store.create(resource, None, {k: v for k, v in obj.items() if k not in ("apiVersion", "kind")})


def start_sandbox(
    state_dir: Path,
    *,
    nodes: int = 3,
    cpu_per_node: str = "4",
    memory_per_node: str = "8Gi",
    gpus_per_node: int = 0,
    quota: Mapping[str, str | int] | None = None,
    namespace: str = "iris",
    port: int = 0,
    token: str | None = None,
    node_labels: Mapping[str, str] | None = None,
) -> Sandbox:
    """Start server + simulators on background threads, with namespace, flavor and queues created.

    ``quota`` (resource -> nominal quota of the ClusterQueue) defaults to the nodes' total capacity.
    The server speaks HTTPS with a bearer token; the kubeconfig carries both.
    """
    state_dir = Path(state_dir)
    state_dir.mkdir(parents=True, exist_ok=True)
    token = token or secrets.token_urlsafe(24)
    server = FakeApiServer(port=port, tokens=[token], tls=True, state_dir=state_dir / "apiserver").start()
    kueue = KueueSimulator(server).start()
    specs = [
        NodeSpec(
            f"node-{i}",
            cpu=cpu_per_node,
            memory=memory_per_node,
            gpus=gpus_per_node,
            labels=dict(node_labels or {}),
        )
        for i in range(nodes)
    ]
    kubelet = KubeletSimulator(server, specs, work_dir=state_dir / "pods").start()
    store = server.store
    store.create(NAMESPACES, None, {"metadata": {"name": namespace}})
    store.create(RESOURCE_FLAVORS, None, {"metadata": {"name": FLAVOR_NAME}, "spec": {}})
    store.create(
        CLUSTER_QUEUES,
        None,
        cluster_queue_object(quota or default_quota(nodes, cpu_per_node, memory_per_node, gpus_per_node)),
    )
    store.create(
        LOCAL_QUEUES,
        namespace,
        {"metadata": {"name": LOCAL_QUEUE_NAME}, "spec": {"clusterQueue": CLUSTER_QUEUE_NAME}},
    )
    _apply_priority_classes(store)
    kubeconfig = server.write_kubeconfig(state_dir / "kubeconfig", namespace=namespace)
    return Sandbox(server, kueue, kubelet, kubeconfig, token, namespace, state_dir)


def _write_ready_file(path: Path, sandbox: Sandbox) -> None:
    payload = {
        "server_url": sandbox.server_url,
        "kubeconfig": str(sandbox.kubeconfig_path),
        "token": sandbox.token,
        "namespace": sandbox.namespace,
        "pid": os.getpid(),
    }
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(payload))
    tmp.replace(path)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m iris.testing.k8s_sandbox", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--state-dir", type=Path, required=True)
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--ready-file", type=Path)
    parser.add_argument("--nodes", type=int, default=3)
    parser.add_argument("--cpu-per-node", default="4")
    parser.add_argument("--memory-per-node", default="8Gi")
    parser.add_argument("--gpus-per-node", type=int, default=0)
    parser.add_argument("--namespace", default="iris")
    args = parser.parse_args(argv)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    sandbox = start_sandbox(
        args.state_dir,
        nodes=args.nodes,
        cpu_per_node=args.cpu_per_node,
        memory_per_node=args.memory_per_node,
        gpus_per_node=args.gpus_per_node,
        namespace=args.namespace,
        port=args.port,
    )
    try:
        if args.ready_file:
            _write_ready_file(args.ready_file, sandbox)
        print(
            json.dumps({"server_url": sandbox.server_url, "kubeconfig": str(sandbox.kubeconfig_path)}),
            flush=True,
        )
        stop.wait()
    finally:
        sandbox.stop()


if __name__ == "__main__":
    main()
