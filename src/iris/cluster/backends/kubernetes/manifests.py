"""What an operator applies to run Iris on a cluster with Kueue (pure).

``render_manifests`` returns plain dicts, in apply order: the namespace and its Kueue
queues, the priority classes, RBAC for the controller, and the controller itself (a
single-replica Deployment with ``strategy: Recreate``, because its SQLite file lives on a
ReadWriteOnce volume that must never be mounted twice).
"""

from __future__ import annotations

import re
from typing import Any

import yaml

from iris.cluster.backends.kubernetes.config import KubernetesBackendConfig
from iris.rpc.enums import PriorityBand

DEFAULT_IMAGE = "ghcr.io/marin-community/iris:latest"
CONTROLLER = "iris-controller"
STATE_DIR = "/var/lib/iris"
KUEUE_API_VERSIONS = ("v1beta2", "v1beta1")

# Higher bands win Kueue admission and Kueue may evict strictly lower ones inside our ClusterQueue
# (its ``preemption.withinClusterQueue``). Our PriorityClasses order kube-scheduler's queue but
# never preempt (``preemptionPolicy: Never``): a cluster-wide PriorityClass that preempts would
# let Iris tasks evict other tenants' pods on any node, outside every quota.
BAND_PRIORITIES: dict[PriorityBand, int] = {
    PriorityBand.PRODUCTION: 1000,
    PriorityBand.INTERACTIVE: 100,
    PriorityBand.BATCH: 10,
}
SYSTEM_PRIORITY_CLASS = "iris-system"
SYSTEM_PRIORITY = 100_000

# The namespaced API calls the controller makes (see api.KubeApi), and nothing more.
ROLE_RULES: list[dict[str, Any]] = [
    {"apiGroups": [""], "resources": ["pods"], "verbs": ["create", "delete", "get", "list", "watch"]},
    {"apiGroups": [""], "resources": ["pods/log"], "verbs": ["get"]},
    # One Secret per attempt holds its job token (and the job's secrets), owned by its pod.
    {"apiGroups": [""], "resources": ["secrets"], "verbs": ["create", "patch", "get", "delete"]},
    # Websocket exec is a GET upgraded in place; newer API servers authorize it as create.
    {"apiGroups": [""], "resources": ["pods/exec"], "verbs": ["create", "get"]},
    {"apiGroups": [""], "resources": ["events"], "verbs": ["list"]},
    {"apiGroups": ["kueue.x-k8s.io"], "resources": ["workloads"], "verbs": ["list"]},
]
# Cluster-scoped reads for the dashboard's Cluster view.
CLUSTER_ROLE_RULES: list[dict[str, Any]] = [
    {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list"]},
]


_QUANTITY = re.compile(r"^(\d+(\.\d+)?|\.\d+)(m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei)?$")
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


def check_quantity(what: str, value: str) -> None:
    if not _QUANTITY.match(value):
        raise ValueError(f"{what} {value!r} is not a Kubernetes quantity (e.g. 64, 500m, 256Gi)")


def check_name(what: str, value: str) -> None:
    if len(value) > 63 or not _DNS_LABEL.match(value):
        raise ValueError(f"{what} {value!r} must be a DNS-1123 label (lowercase letters, digits and '-')")


def render_manifests(
    *,
    namespace: str = "iris",
    image: str = DEFAULT_IMAGE,
    controller_port: int = 10000,
    storage: str = "1Gi",
    storage_class: str | None = None,
    queue: str = "iris",
    cluster_queue: str | None = None,
    resource_flavor: str = "iris-default",
    cpu_quota: str = "64",
    memory_quota: str = "256Gi",
    disk_quota: str = "1Ti",
    gpu_quota: str = "0",
    tpu_quota: str = "0",
    controller_cpu: str = "1",
    controller_memory: str = "2Gi",
    kueue_api_version: str = "v1beta2",
) -> list[dict[str, Any]]:
    """Every object of an Iris installation, ready to be dumped as YAML and applied."""
    if kueue_api_version not in KUEUE_API_VERSIONS:
        raise ValueError(f"kueue_api_version must be one of {', '.join(KUEUE_API_VERSIONS)}")
    cluster_queue = cluster_queue or f"iris-{namespace}"
    for what, name in (("namespace", namespace), ("queue", queue), ("cluster queue", cluster_queue)):
        check_name(what, name)
    check_name("resource flavor", resource_flavor)
    for what, quantity in (
        ("cpu quota", cpu_quota),
        ("memory quota", memory_quota),
        ("disk quota", disk_quota),
        ("gpu quota", gpu_quota),
        ("tpu quota", tpu_quota),
        ("storage", storage),
        ("controller cpu", controller_cpu),
        ("controller memory", controller_memory),
    ):
        check_quantity(what, quantity)
    if not 1 <= controller_port <= 65535:
        raise ValueError(f"controller port {controller_port} is not a TCP port")
    kueue = f"kueue.x-k8s.io/{kueue_api_version}"
    labels = {"app.kubernetes.io/name": CONTROLLER, "app.kubernetes.io/part-of": "iris"}
    cluster_scoped_name = f"{CONTROLLER}-{namespace}"
    defaults = KubernetesBackendConfig()
    priority_classes = defaults.priority_classes
    # Kueue leaves a workload pending for good when it requests a resource its ClusterQueue does
    # not cover, so every device resource the backend can put on a pod is covered here.
    device_quotas = {"gpu": gpu_quota, "tpu": tpu_quota}
    quotas = {"cpu": cpu_quota, "memory": memory_quota, "ephemeral-storage": disk_quota}
    for device, resource_name in sorted(defaults.device_resources.items()):
        quotas[resource_name] = device_quotas.get(device, "0")

    objects: list[dict[str, Any]] = [
        {
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {"name": namespace, "labels": {"app.kubernetes.io/part-of": "iris"}},
        },
        {
            "apiVersion": kueue,
            "kind": "ResourceFlavor",
            "metadata": {"name": resource_flavor},
            "spec": {},
        },
        _cluster_queue(
            kueue,
            cluster_queue,
            namespace,
            resource_flavor,
            quotas,
        ),
        {
            "apiVersion": kueue,
            "kind": "LocalQueue",
            "metadata": {"name": queue, "namespace": namespace},
            "spec": {"clusterQueue": cluster_queue},
        },
    ]
    for band, value in BAND_PRIORITIES.items():
        name = priority_classes[band]
        objects.append(
            {
                "apiVersion": kueue,
                "kind": "WorkloadPriorityClass",
                "metadata": {"name": name},
                "value": value,
                "description": f"Iris {band.value} band: Kueue admission order",
            }
        )
        objects.append(
            {
                "apiVersion": "scheduling.k8s.io/v1",
                "kind": "PriorityClass",
                "metadata": {"name": name},
                "value": value,
                "globalDefault": False,
                "preemptionPolicy": "Never",
                "description": f"Iris {band.value} band: kube-scheduler order",
            }
        )
    objects.append(
        {
            "apiVersion": "scheduling.k8s.io/v1",
            "kind": "PriorityClass",
            "metadata": {"name": SYSTEM_PRIORITY_CLASS},
            "value": SYSTEM_PRIORITY,
            "globalDefault": False,
            "preemptionPolicy": "Never",
            "description": "The Iris controller: never displaced by the tasks it runs",
        }
    )
    objects += [
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {"name": CONTROLLER, "namespace": namespace, "labels": labels},
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": {"name": CONTROLLER, "namespace": namespace, "labels": labels},
            "rules": ROLE_RULES,
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": CONTROLLER, "namespace": namespace, "labels": labels},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": CONTROLLER},
            "subjects": [{"kind": "ServiceAccount", "name": CONTROLLER, "namespace": namespace}],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": cluster_scoped_name, "labels": labels},
            "rules": CLUSTER_ROLE_RULES,
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": cluster_scoped_name, "labels": labels},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": cluster_scoped_name,
            },
            "subjects": [{"kind": "ServiceAccount", "name": CONTROLLER, "namespace": namespace}],
        },
        _pvc(namespace, storage, storage_class, labels),
        _deployment(
            namespace=namespace,
            image=image,
            port=controller_port,
            labels=labels,
            queue=queue,
            cpu=controller_cpu,
            memory=controller_memory,
        ),
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": CONTROLLER, "namespace": namespace, "labels": labels},
            "spec": {
                "type": "ClusterIP",
                "selector": {"app.kubernetes.io/name": CONTROLLER},
                "ports": [{"name": "http", "port": controller_port, "targetPort": "http", "protocol": "TCP"}],
            },
        },
    ]
    return objects


class _NoAliasDumper(yaml.SafeDumper):
    """Writes a shared dict out in full each time instead of as ``&id001``/``*id001``."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def manifests_yaml(objects: list[dict[str, Any]]) -> str:
    return yaml.dump_all(objects, Dumper=_NoAliasDumper, sort_keys=False, explicit_start=True)


def pull_policy(image: str) -> str:
    """``Always`` for a moving tag (``:latest`` or none), ``IfNotPresent`` for a pinned one."""
    if "@" in image:
        return "IfNotPresent"
    name = image.rsplit("/", 1)[-1]
    tag = name.split(":", 1)[1] if ":" in name else "latest"
    return "Always" if tag == "latest" else "IfNotPresent"


def controller_command(*, port: int, namespace: str, queue: str, image: str = DEFAULT_IMAGE) -> list[str]:
    """`iris controller start` as the Deployment runs it (in-cluster credentials: no kubeconfig).

    Task pods reach the controller through its Service, and run the same image (so Iris and the
    callable runner are there).
    """
    return [
        "iris",
        "controller",
        "start",
        "--backend",
        "kubernetes",
        "--host",
        "0.0.0.0",
        "--port",
        str(port),
        "--state-dir",
        STATE_DIR,
        "--namespace",
        namespace,
        "--queue",
        queue,
        "--advertise-url",
        f"http://{CONTROLLER}.{namespace}.svc.cluster.local:{port}",
        "--image",
        image,
    ]


def _cluster_queue(
    api_version: str,
    name: str,
    namespace: str,
    flavor: str,
    quotas: dict[str, str],
) -> dict[str, Any]:
    """The fields used here are spelled the same in v1beta1 and v1beta2."""
    spec: dict[str, Any] = {
        # Only workloads from the Iris namespace may borrow this queue's quota.
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}},
        "queueingStrategy": "BestEffortFIFO",
        "preemption": {"withinClusterQueue": "LowerPriority", "reclaimWithinCohort": "Never"},
        "resourceGroups": [
            {
                "coveredResources": list(quotas),
                "flavors": [
                    {
                        "name": flavor,
                        "resources": [{"name": r, "nominalQuota": q} for r, q in quotas.items()],
                    }
                ],
            }
        ],
    }
    return {"apiVersion": api_version, "kind": "ClusterQueue", "metadata": {"name": name}, "spec": spec}


def _pvc(namespace: str, storage: str, storage_class: str | None, labels: dict[str, str]) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "accessModes": ["ReadWriteOnce"],
        "resources": {"requests": {"storage": storage}},
    }
    if storage_class:
        spec["storageClassName"] = storage_class
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": f"{CONTROLLER}-state", "namespace": namespace, "labels": labels},
        "spec": spec,
    }


def _deployment(
    *,
    namespace: str,
    image: str,
    port: int,
    labels: dict[str, str],
    queue: str,
    cpu: str,
    memory: str,
) -> dict[str, Any]:
    selector = {"app.kubernetes.io/name": CONTROLLER}
    probe = {"tcpSocket": {"port": "http"}, "periodSeconds": 10, "timeoutSeconds": 5}
    container = {
        "name": "controller",
        "image": image,
        "imagePullPolicy": pull_policy(image),
        "command": controller_command(port=port, namespace=namespace, queue=queue, image=image),
        "ports": [{"name": "http", "containerPort": port, "protocol": "TCP"}],
        "env": [{"name": "PYTHONUNBUFFERED", "value": "1"}],
        "resources": {"requests": {"cpu": cpu, "memory": memory}, "limits": {"memory": memory}},
        "readinessProbe": dict(probe, failureThreshold=3),
        "livenessProbe": dict(probe, initialDelaySeconds=30, failureThreshold=6),
        "volumeMounts": [{"name": "state", "mountPath": STATE_DIR}],
    }
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": CONTROLLER, "namespace": namespace, "labels": labels},
        "spec": {
            "replicas": 1,
            # Never two controllers on one SQLite file: the old pod goes before the new one starts.
            "strategy": {"type": "Recreate"},
            "selector": {"matchLabels": selector},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "serviceAccountName": CONTROLLER,
                    "priorityClassName": SYSTEM_PRIORITY_CLASS,
                    "containers": [container],
                    "volumes": [
                        {"name": "state", "persistentVolumeClaim": {"claimName": f"{CONTROLLER}-state"}},
                    ],
                },
            },
        },
    }
