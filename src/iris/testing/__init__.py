"""A local stand-in for a Kubernetes cluster with Kueue, for tests and ``--backend kubernetes`` sandboxes.

- ``fake_apiserver``: ``FakeApiServer`` speaks the real REST + watch protocol (kubectl, the
  official client and lightkube work unchanged), including pods/log, pods/exec and Kueue kinds.
- ``kueue_sim``: ``KueueSimulator`` gates queued pods and admits them by ClusterQueue quota and
  priority, pod groups all at once, preempting lower-priority workloads when needed.
- ``kubelet_sim``: ``KubeletSimulator`` schedules ungated pods onto fake Nodes and runs their
  first container as a local process group.
- ``k8s_sandbox``: ``start_sandbox(state_dir)`` wires the three together (also a CLI).
"""
