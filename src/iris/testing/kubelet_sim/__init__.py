"""A kubelet + kube-scheduler simulator: fake Nodes, pods run as local process groups."""

from iris.testing.kubelet_sim.nodes import NodeSpec, node_object
from iris.testing.kubelet_sim.scheduling import NodeInfo, Placement, node_info, schedule_pod
from iris.testing.kubelet_sim.simulator import KubeletSimulator

__all__ = [
    "KubeletSimulator",
    "NodeInfo",
    "NodeSpec",
    "Placement",
    "node_info",
    "node_object",
    "schedule_pod",
]
