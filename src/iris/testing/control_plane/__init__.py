"""The real Kubernetes control plane (etcd, kube-apiserver, kube-controller-manager, kube-scheduler,
Kueue) plus our node agent, on loopback, for tests and for ``scripts/k8s-control-plane up|down``.
"""

from iris.testing.control_plane.binaries import MissingBinaries, bin_dir, require_binaries
from iris.testing.control_plane.cluster import (
    ControlPlane,
    ControlPlaneOptions,
    start_control_plane,
    stop_run_dir,
)
from iris.testing.control_plane.processes import StartupError

__all__ = [
    "ControlPlane",
    "ControlPlaneOptions",
    "MissingBinaries",
    "StartupError",
    "bin_dir",
    "require_binaries",
    "start_control_plane",
    "stop_run_dir",
]
