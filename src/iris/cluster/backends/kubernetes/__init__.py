"""Kubernetes backend: one Pod per task attempt, admitted by Kueue, placed by kube-scheduler.

``KubernetesBackend`` is imported on first use, so pure helpers (manifests, naming, status)
load without the API client stack.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from iris.cluster.backends.kubernetes.config import KubernetesBackendConfig

if TYPE_CHECKING:
    from iris.cluster.backends.kubernetes.backend import KubernetesBackend

__all__ = ["KubernetesBackend", "KubernetesBackendConfig"]


def __getattr__(name: str) -> Any:
    if name == "KubernetesBackend":
        from iris.cluster.backends.kubernetes.backend import KubernetesBackend

        return KubernetesBackend
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
