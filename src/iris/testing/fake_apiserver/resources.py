"""The resource types the fake API server serves, with their discovery metadata."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ResourceType:
    """One REST resource (e.g. core/v1 ``pods``), enough to route, store and discover it."""

    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool
    short_names: tuple[str, ...] = ()
    has_status: bool = True
    field_labels: tuple[str, ...] = ()
    categories: tuple[str, ...] = ()

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def key(self) -> str:
        """Storage key: group + plural (one version per group here)."""
        return f"{self.plural}.{self.group}" if self.group else self.plural

    @property
    def qualified_plural(self) -> str:
        """How errors name the resource: ``pods``, ``workloads.kueue.x-k8s.io``."""
        return self.key

    @property
    def singular(self) -> str:
        return self.kind.lower()

    @property
    def list_kind(self) -> str:
        return f"{self.kind}List"

    @property
    def supported_field_labels(self) -> frozenset[str]:
        base = {"metadata.name"} | ({"metadata.namespace"} if self.namespaced else set())
        return frozenset(base | set(self.field_labels))


_POD_FIELDS = (
    "spec.nodeName",
    "spec.restartPolicy",
    "spec.schedulerName",
    "spec.serviceAccountName",
    "status.phase",
    "status.podIP",
    "status.nominatedNodeName",
)
_EVENT_FIELDS = (
    "involvedObject.kind",
    "involvedObject.namespace",
    "involvedObject.name",
    "involvedObject.uid",
    "involvedObject.apiVersion",
    "involvedObject.resourceVersion",
    "involvedObject.fieldPath",
    "reason",
    "reportingComponent",
    "source",
    "type",
)
KUEUE_GROUP = "kueue.x-k8s.io"
KUEUE_VERSION = "v1beta1"

PODS = ResourceType("", "v1", "pods", "Pod", True, ("po",), field_labels=_POD_FIELDS, categories=("all",))
NAMESPACES = ResourceType("", "v1", "namespaces", "Namespace", False, ("ns",), field_labels=("status.phase",))
NODES = ResourceType("", "v1", "nodes", "Node", False, ("no",), field_labels=("spec.unschedulable",))
EVENTS = ResourceType(
    "", "v1", "events", "Event", True, ("ev",), has_status=False, field_labels=_EVENT_FIELDS
)
CONFIGMAPS = ResourceType("", "v1", "configmaps", "ConfigMap", True, ("cm",), has_status=False)
SECRETS = ResourceType("", "v1", "secrets", "Secret", True, has_status=False, field_labels=("type",))
SERVICES = ResourceType("", "v1", "services", "Service", True, ("svc",), categories=("all",))
SERVICE_ACCOUNTS = ResourceType(
    "", "v1", "serviceaccounts", "ServiceAccount", True, ("sa",), has_status=False
)
PERSISTENT_VOLUME_CLAIMS = ResourceType(
    "", "v1", "persistentvolumeclaims", "PersistentVolumeClaim", True, ("pvc",)
)
PRIORITY_CLASSES = ResourceType(
    "scheduling.k8s.io", "v1", "priorityclasses", "PriorityClass", False, ("pc",), has_status=False
)
DEPLOYMENTS = ResourceType("apps", "v1", "deployments", "Deployment", True, ("deploy",), categories=("all",))
STATEFUL_SETS = ResourceType("apps", "v1", "statefulsets", "StatefulSet", True, ("sts",), categories=("all",))
POD_DISRUPTION_BUDGETS = ResourceType(
    "policy", "v1", "poddisruptionbudgets", "PodDisruptionBudget", True, ("pdb",)
)
ROLES = ResourceType("rbac.authorization.k8s.io", "v1", "roles", "Role", True, has_status=False)
ROLE_BINDINGS = ResourceType(
    "rbac.authorization.k8s.io", "v1", "rolebindings", "RoleBinding", True, has_status=False
)
CLUSTER_ROLES = ResourceType(
    "rbac.authorization.k8s.io", "v1", "clusterroles", "ClusterRole", False, has_status=False
)
CLUSTER_ROLE_BINDINGS = ResourceType(
    "rbac.authorization.k8s.io", "v1", "clusterrolebindings", "ClusterRoleBinding", False, has_status=False
)
RESOURCE_FLAVORS = ResourceType(
    KUEUE_GROUP,
    KUEUE_VERSION,
    "resourceflavors",
    "ResourceFlavor",
    False,
    ("flavor", "flavors", "rf"),
    has_status=False,
)
CLUSTER_QUEUES = ResourceType(KUEUE_GROUP, KUEUE_VERSION, "clusterqueues", "ClusterQueue", False, ("cq",))
LOCAL_QUEUES = ResourceType(
    KUEUE_GROUP, KUEUE_VERSION, "localqueues", "LocalQueue", True, ("queue", "queues", "lq")
)
WORKLOADS = ResourceType(KUEUE_GROUP, KUEUE_VERSION, "workloads", "Workload", True, ("wl",))
WORKLOAD_PRIORITY_CLASSES = ResourceType(
    KUEUE_GROUP, KUEUE_VERSION, "workloadpriorityclasses", "WorkloadPriorityClass", False, has_status=False
)

BUILTIN_RESOURCES: tuple[ResourceType, ...] = (
    PODS,
    NAMESPACES,
    NODES,
    EVENTS,
    CONFIGMAPS,
    SECRETS,
    SERVICES,
    SERVICE_ACCOUNTS,
    PERSISTENT_VOLUME_CLAIMS,
    PRIORITY_CLASSES,
    DEPLOYMENTS,
    STATEFUL_SETS,
    POD_DISRUPTION_BUDGETS,
    ROLES,
    ROLE_BINDINGS,
    CLUSTER_ROLES,
    CLUSTER_ROLE_BINDINGS,
    RESOURCE_FLAVORS,
    CLUSTER_QUEUES,
    LOCAL_QUEUES,
    WORKLOADS,
    WORKLOAD_PRIORITY_CLASSES,
)


class ResourceRegistry:
    """Lookup of served resources by group/version/plural (thread-safe for reads after setup)."""

    def __init__(self, resources: tuple[ResourceType, ...] = BUILTIN_RESOURCES) -> None:
        self._by_path: dict[tuple[str, str, str], ResourceType] = {}
        for resource in resources:
            self.register(resource)

    def register(self, resource: ResourceType) -> None:
        self._by_path[(resource.group, resource.version, resource.plural)] = resource

    def lookup(self, group: str, version: str, plural: str) -> ResourceType | None:
        return self._by_path.get((group, version, plural))

    def all(self) -> list[ResourceType]:
        return list(self._by_path.values())

    def group_versions(self) -> dict[str, list[str]]:
        """group -> versions served (core group under "")."""
        out: dict[str, list[str]] = {}
        for group, version, _ in self._by_path:
            versions = out.setdefault(group, [])
            if version not in versions:
                versions.append(version)
        return out

    def in_group_version(self, group: str, version: str) -> list[ResourceType]:
        return [r for (g, v, _), r in self._by_path.items() if g == group and v == version]
