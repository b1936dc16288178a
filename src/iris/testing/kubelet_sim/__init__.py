"""The node agent: extra Nodes on the real control plane whose pods run as local process groups
(``python -m iris.testing.kubelet_sim.node_agent``), for multi-node scheduling tests."""

from iris.testing.kubelet_sim.nodes import NodeSpec, node_object

__all__ = ["NodeSpec", "node_object"]
