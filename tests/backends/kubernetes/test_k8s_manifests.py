"""render_manifests and `iris k8s manifests`: every object validates against real schemas."""

from __future__ import annotations

import copy
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml
from click.testing import CliRunner

from iris.cli.k8s_cmd import k8s
from iris.cluster.backends.kubernetes.config import KubernetesBackendConfig
from iris.cluster.backends.kubernetes.manifests import manifests_yaml, render_manifests

K8S_VERSION = "1.31"
CRDS = Path(__file__).parent / "crds"
KUEUE_KINDS = {
    "ClusterQueue": "clusterqueues",
    "LocalQueue": "localqueues",
    "ResourceFlavor": "resourceflavors",
    "WorkloadPriorityClass": "workloadpriorityclasses",
}


def _strict(schema: Any) -> Any:
    """The API server prunes unknown fields silently; a test should reject them instead."""
    if isinstance(schema, dict):
        out = {k: _strict(v) for k, v in schema.items()}
        if (
            out.get("type") == "object"
            and "properties" in out
            and "additionalProperties" not in out
            and not out.get("x-kubernetes-preserve-unknown-fields")
        ):
            out["additionalProperties"] = False
        return out
    if isinstance(schema, list):
        return [_strict(v) for v in schema]
    return schema


@cache
def crd_schema(kind: str, version: str) -> dict[str, Any]:
    crd = yaml.safe_load((CRDS / f"kueue.x-k8s.io_{KUEUE_KINDS[kind]}.yaml").read_text())
    for v in crd["spec"]["versions"]:
        if v["name"] == version:
            assert v["served"], f"{kind} {version} is not served"
            schema = _strict(copy.deepcopy(v["schema"]["openAPIV3Schema"]))
            # metadata is only "type: object" in CRDs; check the name the API server would.
            schema["properties"]["metadata"] = {
                "type": "object",
                "required": ["name"],
                "properties": {
                    "name": {
                        "type": "string",
                        "pattern": r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$",
                        "maxLength": 63,
                    },
                    "namespace": {"type": "string"},
                    "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                },
                "additionalProperties": False,
            }
            return schema
    raise AssertionError(f"no version {version} of {kind}")


def validate(obj: dict[str, Any]) -> None:
    group, _, version = obj["apiVersion"].rpartition("/")
    if group == "kueue.x-k8s.io":
        jsonschema.validate(obj, crd_schema(obj["kind"], version))
    else:
        kubernetes_validate.validate(obj, K8S_VERSION, strict=True)


@pytest.mark.parametrize("kueue_version", ["v1beta2", "v1beta1"])
def test_every_object_validates(kueue_version: str) -> None:
    objects = render_manifests(
        namespace="ml", image="registry.example/iris:1.0", kueue_api_version=kueue_version
    )
    for obj in objects:
        validate(obj)


def test_the_schema_check_would_catch_a_typo() -> None:
    objects = render_manifests()
    queue = next(o for o in objects if o["kind"] == "ClusterQueue")
    queue["spec"]["queueingStrategyy"] = "BestEffortFIFO"
    with pytest.raises(jsonschema.ValidationError):
        validate(queue)
    deployment = next(o for o in objects if o["kind"] == "Deployment")
    deployment["spec"]["replica"] = 1
    with pytest.raises(kubernetes_validate.ValidationError):
        validate(deployment)


def by_kind(objects: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for obj in objects:
        out.setdefault(obj["kind"], []).append(obj)
    return out


def test_inventory_and_wiring() -> None:
    kinds = by_kind(
        render_manifests(namespace="ml", queue="q", cpu_quota="16", gpu_quota="8", tpu_quota="32")
    )
    for kind in (
        "Namespace",
        "ServiceAccount",
        "Role",
        "RoleBinding",
        "ClusterRole",
        "ClusterRoleBinding",
        "ResourceFlavor",
        "ClusterQueue",
        "LocalQueue",
        "PersistentVolumeClaim",
        "Deployment",
        "Service",
    ):
        assert len(kinds[kind]) == 1, kind
    assert kinds["Namespace"][0]["metadata"]["name"] == "ml"
    local = kinds["LocalQueue"][0]
    cluster_queue = kinds["ClusterQueue"][0]
    assert local["metadata"] == {"name": "q", "namespace": "ml"}
    assert local["spec"]["clusterQueue"] == cluster_queue["metadata"]["name"]
    flavor = cluster_queue["spec"]["resourceGroups"][0]["flavors"][0]
    assert flavor["name"] == kinds["ResourceFlavor"][0]["metadata"]["name"]
    quotas = {r["name"]: r["nominalQuota"] for r in flavor["resources"]}
    assert quotas["cpu"] == "16" and quotas["nvidia.com/gpu"] == "8" and quotas["google.com/tpu"] == "32"
    # every resource a task pod can request is covered, or Kueue could never admit it
    devices = set(KubernetesBackendConfig().device_resources.values())
    assert {"google.com/tpu", "nvidia.com/gpu"} <= devices
    assert {"cpu", "memory", "ephemeral-storage", *devices} <= set(
        cluster_queue["spec"]["resourceGroups"][0]["coveredResources"]
    )


def test_priority_classes_order_the_bands() -> None:
    kinds = by_kind(render_manifests())
    config = KubernetesBackendConfig()
    wpc = {o["metadata"]["name"]: o["value"] for o in kinds["WorkloadPriorityClass"]}
    pc = {o["metadata"]["name"]: o for o in kinds["PriorityClass"]}
    prod, inter, batch = (config.priority_classes[b] for b in ("PRODUCTION", "INTERACTIVE", "BATCH"))
    assert wpc[prod] > wpc[inter] > wpc[batch]
    assert pc[prod]["value"] > pc[inter]["value"] > pc[batch]["value"]
    system = pc["iris-system"]["value"]
    assert system > pc[prod]["value"]
    # Cluster-wide PriorityClasses must not let Iris evict other tenants' pods: Kueue's
    # ClusterQueue preemption (within our own queue) is how a higher band displaces a lower one.
    assert {o["preemptionPolicy"] for o in pc.values()} == {"Never"}
    cluster_queue = kinds["ClusterQueue"][0]["spec"]
    assert cluster_queue["preemption"]["withinClusterQueue"] == "LowerPriority"
    assert cluster_queue["preemption"]["reclaimWithinCohort"] == "Never"


def test_rbac_is_namespaced_except_nodes() -> None:
    kinds = by_kind(render_manifests(namespace="ml"))
    role = kinds["Role"][0]
    assert role["metadata"]["namespace"] == "ml"
    verbs = {
        (g, r): set(rule["verbs"])
        for rule in role["rules"]
        for g in rule["apiGroups"]
        for r in rule["resources"]
    }
    assert verbs[("", "pods")] == {"create", "delete", "get", "list", "watch"}
    assert verbs[("", "pods/log")] == {"get"}
    assert ("", "pods/exec") in verbs and ("kueue.x-k8s.io", "workloads") in verbs
    cluster_rules = kinds["ClusterRole"][0]["rules"]
    assert [r["resources"] for r in cluster_rules] == [["nodes"]]
    assert all("create" not in r["verbs"] and "delete" not in r["verbs"] for r in cluster_rules)
    for binding in kinds["RoleBinding"] + kinds["ClusterRoleBinding"]:
        assert binding["subjects"] == [
            {"kind": "ServiceAccount", "name": "iris-controller", "namespace": "ml"}
        ]


def test_controller_deployment() -> None:
    kinds = by_kind(
        render_manifests(namespace="ml", image="registry.example/iris:1.0", controller_port=9000, queue="q")
    )
    deployment = kinds["Deployment"][0]["spec"]
    assert deployment["replicas"] == 1 and deployment["strategy"] == {"type": "Recreate"}
    pod = deployment["template"]["spec"]
    assert pod["serviceAccountName"] == "iris-controller"
    container = pod["containers"][0]
    assert container["image"] == "registry.example/iris:1.0"
    assert container["imagePullPolicy"] == "IfNotPresent"  # a pinned tag never moves
    command = container["command"]
    assert command[:3] == ["iris", "controller", "start"]
    state_dir = command[command.index("--state-dir") + 1]
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    assert mounts["state"] == state_dir
    claim = next(v for v in pod["volumes"] if v["name"] == "state")["persistentVolumeClaim"]["claimName"]
    assert claim == kinds["PersistentVolumeClaim"][0]["metadata"]["name"]
    service = kinds["Service"][0]["spec"]
    assert service["ports"][0]["port"] == 9000
    assert service["selector"].items() <= deployment["template"]["metadata"]["labels"].items()


@pytest.mark.parametrize(
    ("image", "policy"),
    [
        ("ghcr.io/marin-community/iris:latest", "Always"),
        ("ghcr.io/marin-community/iris", "Always"),
        ("localhost:5000/iris", "Always"),
        ("localhost:5000/iris:0.3.1", "IfNotPresent"),
        ("ghcr.io/x/iris@sha256:" + "a" * 64, "IfNotPresent"),
    ],
)
def test_pull_policy_fits_the_tag(image: str, policy: str) -> None:
    deployment = by_kind(render_manifests(image=image))["Deployment"][0]
    assert deployment["spec"]["template"]["spec"]["containers"][0]["imagePullPolicy"] == policy


def test_yaml_has_no_anchors() -> None:
    """Shared dicts (RBAC rules, probes) must be written out in full: kubectl users read this."""
    text = manifests_yaml(render_manifests())
    assert "&id" not in text and "*id" not in text
    assert [d for d in yaml.safe_load_all(text) if d] == render_manifests()


def test_controller_command_is_accepted_by_the_real_cli() -> None:
    """The Deployment's command must parse with `iris controller start` as it is today."""
    from iris.cli.main import cli

    objects = render_manifests(namespace="ml", controller_port=9000, queue="q")
    command = next(o for o in objects if o["kind"] == "Deployment")["spec"]["template"]["spec"]["containers"][
        0
    ]["command"]
    assert command[0] == "iris"
    group = cli.get_command(None, command[1])  # type: ignore[arg-type]
    start = group.get_command(None, command[2])  # type: ignore[union-attr]
    ctx = start.make_context("start", list(command[3:]))  # type: ignore[union-attr]
    assert ctx.params["backend"] == "kubernetes"
    assert (ctx.params["host"], ctx.params["port"]) == ("0.0.0.0", 9000)
    assert (ctx.params["namespace"], ctx.params["queue"]) == ("ml", "q")
    assert ctx.params["kubeconfig"] is None  # in-cluster credentials of the ServiceAccount


@pytest.mark.parametrize(
    "kwargs",
    [{"namespace": "Bad_NS"}, {"cpu_quota": "lots"}, {"storage": "1 GB"}, {"kueue_api_version": "v2"}],
)
def test_bad_input_is_rejected(kwargs: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        render_manifests(**kwargs)


def test_cli_prints_multi_document_yaml() -> None:
    result = CliRunner().invoke(
        k8s, ["manifests", "--namespace", "team", "--image", "img:2", "--queue", "tq", "--cpu-quota", "32"]
    )
    assert result.exit_code == 0, result.output
    docs = [d for d in yaml.safe_load_all(result.output) if d]
    assert docs == render_manifests(namespace="team", image="img:2", queue="tq", cpu_quota="32")
    for doc in docs:
        validate(doc)


def test_cli_reports_bad_input_as_usage_error() -> None:
    result = CliRunner().invoke(k8s, ["manifests", "--cpu-quota", "lots"])
    assert result.exit_code == 2
    assert "cpu quota 'lots' is not a Kubernetes quantity" in result.output
