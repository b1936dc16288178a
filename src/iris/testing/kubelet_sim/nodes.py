"""Fake Node objects: capacity, labels and a Ready condition, as a real kubelet registers them."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from iris.testing.kubelet_sim.k8s_types import NODE_AGENT_VERSION, utc_timestamp


@dataclass(frozen=True)
class NodeSpec:
    name: str
    cpu: str = "4"
    memory: str = "8Gi"
    gpus: int = 0
    pods: int = 110
    labels: Mapping[str, str] = field(default_factory=dict)
    taints: tuple[Mapping[str, str], ...] = ()


def node_object(spec: NodeSpec) -> dict[str, Any]:
    capacity = {"cpu": spec.cpu, "memory": spec.memory, "pods": str(spec.pods), "ephemeral-storage": "100Gi"}
    if spec.gpus:
        capacity["nvidia.com/gpu"] = str(spec.gpus)
    now = utc_timestamp()
    labels = {
        "kubernetes.io/hostname": spec.name,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        "node.kubernetes.io/instance-type": "iris-fake",
        **spec.labels,
    }

    def condition(kind: str, status: str, reason: str, message: str) -> dict[str, str]:
        return {"type": kind, "status": status, "reason": reason, "message": message,
                "lastHeartbeatTime": now, "lastTransitionTime": now}  # fmt: skip

    return {
        "metadata": {"name": spec.name, "labels": labels},
        "spec": {"taints": [dict(t) for t in spec.taints]} if spec.taints else {},
        "status": {
            "capacity": capacity,
            "allocatable": dict(capacity),
            "conditions": [
                condition(
                    "MemoryPressure",
                    "False",
                    "KubeletHasSufficientMemory",
                    "kubelet has sufficient memory available",
                ),
                condition(
                    "DiskPressure", "False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"
                ),
                condition(
                    "PIDPressure", "False", "KubeletHasSufficientPID", "kubelet has sufficient PID available"
                ),
                condition("Ready", "True", "KubeletReady", "kubelet is posting ready status"),
            ],
            "addresses": [
                {"type": "InternalIP", "address": "127.0.0.1"},
                {"type": "Hostname", "address": spec.name},
            ],
            "nodeInfo": {
                "kubeletVersion": NODE_AGENT_VERSION,
                "kubeProxyVersion": NODE_AGENT_VERSION,
                "containerRuntimeVersion": "iris-fake://1.0",
                "operatingSystem": "linux",
                "architecture": "amd64",
                "osImage": "iris fake node",
                "kernelVersion": "",
                "machineID": "",
                "systemUUID": "",
                "bootID": "",
            },
        },
    }
