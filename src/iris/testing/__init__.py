"""Test support shipped with Iris (used by the tests and by ``iris cluster start --local``).

- ``control_plane``: the real Kubernetes control plane (etcd, kube-apiserver, scheduler,
  controller-manager, Kueue) on loopback, built from pinned Go modules; ``real_control_plane`` is
  its pytest fixture and ``python -m iris.testing.control_plane serve`` runs one in the foreground.
- ``kubelet_sim``: the node agent, extra Nodes on that plane whose pods run as local process groups.
- ``round_harness``, ``simulated_workers``, ``chaos``, ``netns``, ``container_engine``: helpers for
  the controller, fault-injection and container tests.
"""
