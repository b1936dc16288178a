"""A fake Kubernetes API server speaking the real REST + watch protocol (stdlib HTTP server).

Usage::

    with FakeApiServer(tokens=["t"]) as server:
        write_kubeconfig(path, server.url, "t", "default")
        ...  # kubectl / kubernetes client / lightkube against server.url
"""

from iris.testing.fake_apiserver.errors import ApiError
from iris.testing.fake_apiserver.kubeconfig import write_kubeconfig
from iris.testing.fake_apiserver.pod_logs import ContainerLog, PodLogs
from iris.testing.fake_apiserver.resources import (
    BUILTIN_RESOURCES,
    CLUSTER_QUEUES,
    CONFIGMAPS,
    EVENTS,
    LOCAL_QUEUES,
    NAMESPACES,
    NODES,
    PODS,
    PRIORITY_CLASSES,
    RESOURCE_FLAVORS,
    SECRETS,
    SERVICES,
    WORKLOAD_PRIORITY_CLASSES,
    WORKLOADS,
    ResourceType,
)
from iris.testing.fake_apiserver.server import FakeApiServer
from iris.testing.fake_apiserver.store import (
    PATCH_APPLY,
    PATCH_JSON,
    PATCH_MERGE,
    PATCH_STRATEGIC,
    ObjectStore,
    utc_timestamp,
)
from iris.testing.fake_apiserver.subscriptions import Subscription, WatchEvent

__all__ = [
    "BUILTIN_RESOURCES",
    "CLUSTER_QUEUES",
    "CONFIGMAPS",
    "EVENTS",
    "LOCAL_QUEUES",
    "NAMESPACES",
    "NODES",
    "PATCH_APPLY",
    "PATCH_JSON",
    "PATCH_MERGE",
    "PATCH_STRATEGIC",
    "PODS",
    "PRIORITY_CLASSES",
    "RESOURCE_FLAVORS",
    "SECRETS",
    "SERVICES",
    "WORKLOADS",
    "WORKLOAD_PRIORITY_CLASSES",
    "ApiError",
    "ContainerLog",
    "FakeApiServer",
    "ObjectStore",
    "PodLogs",
    "ResourceType",
    "Subscription",
    "WatchEvent",
    "utc_timestamp",
    "write_kubeconfig",
]
