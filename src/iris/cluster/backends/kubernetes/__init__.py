"""Kubernetes backend: one Pod per task attempt, admitted by Kueue, placed by kube-scheduler."""

from iris.cluster.backends.kubernetes.backend import KubernetesBackend
from iris.cluster.backends.kubernetes.config import KubernetesBackendConfig

__all__ = ["KubernetesBackend", "KubernetesBackendConfig"]
