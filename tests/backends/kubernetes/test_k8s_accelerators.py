"""GPU and TPU pods: device limits, the node pool's tolerations (configurable) and GKE TPU selectors."""

from __future__ import annotations

from typing import Any

import kubernetes_validate
import pytest
from pydantic import ValidationError

from iris.cluster.backends.kubernetes.accelerators import tpu_node_selector
from iris.cluster.backends.kubernetes.config import KubernetesBackendConfig
from iris.cluster.backends.kubernetes.pods import build_pod
from iris.rpc.models import Constraint, DeviceSpec, Entrypoint, ResourceSpec, RunSpec

K8S_VERSION = "1.31"
CONFIG = KubernetesBackendConfig()


def pod_for(
    device: DeviceSpec | None, config: KubernetesBackendConfig = CONFIG, **fields: Any
) -> dict[str, Any]:
    spec = RunSpec(
        attempt_uid="0123456789abcdef",
        attempt_number=0,
        job_id="/alice/train",
        task_id="/alice/train/0",
        task_index=0,
        entrypoint=Entrypoint.from_command("python", "train.py"),
        resources=ResourceSpec(cpu=4, memory="16GB", device=device),
        **fields,
    )
    pod = build_pod(spec, config, controller_url="http://iris:10000", backend_id="k8s")
    kubernetes_validate.validate(pod, K8S_VERSION, strict=True)
    return pod


def test_gpu_pod_gets_the_limit_and_the_gpu_pool_toleration() -> None:
    pod = pod_for(DeviceSpec(type="gpu", variant="a100", count=2))
    container = pod["spec"]["containers"][0]
    assert container["resources"]["limits"]["nvidia.com/gpu"] == "2"
    assert pod["spec"]["tolerations"] == [
        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
    ]
    assert "nodeSelector" not in pod["spec"]


def test_tpu_pod_gets_chips_toleration_and_gke_selectors() -> None:
    pod = pod_for(DeviceSpec(type="tpu", variant="v5litepod-16", count=4))
    assert pod["spec"]["containers"][0]["resources"]["limits"]["google.com/tpu"] == "4"
    assert pod["spec"]["tolerations"] == [
        {"key": "google.com/tpu", "operator": "Exists", "effect": "NoSchedule"}
    ]
    assert pod["spec"]["nodeSelector"] == {
        "cloud.google.com/gke-tpu-accelerator": "tpu-v5-lite-podslice",
        "cloud.google.com/gke-tpu-topology": "4x4",
    }


@pytest.mark.parametrize(
    ("variant", "selector"),
    [
        (
            "v5litepod-8",
            {
                "cloud.google.com/gke-tpu-accelerator": "tpu-v5-lite-podslice",
                "cloud.google.com/gke-tpu-topology": "2x4",
            },
        ),
        (
            "v4-16",
            {
                "cloud.google.com/gke-tpu-accelerator": "tpu-v4-podslice",
                "cloud.google.com/gke-tpu-topology": "2x2x2",
            },
        ),
        (
            "v5p-2x2x1",
            {
                "cloud.google.com/gke-tpu-accelerator": "tpu-v5p-slice",
                "cloud.google.com/gke-tpu-topology": "2x2x1",
            },
        ),
        ("v6e", {"cloud.google.com/gke-tpu-accelerator": "tpu-v6e-slice"}),
        (
            "v6e-3",
            {"cloud.google.com/gke-tpu-accelerator": "tpu-v6e-slice"},
        ),  # no such slice shape: no topology
        ("v99-8", {}),
    ],
)
def test_tpu_variants_map_to_gke_labels(variant: str, selector: dict[str, str]) -> None:
    assert tpu_node_selector(variant, CONFIG) == selector


def test_a_constraint_on_the_topology_label_wins() -> None:
    pod = pod_for(
        DeviceSpec(type="tpu", variant="v5litepod-16", count=4),
        constraints=[Constraint(key="cloud.google.com/gke-tpu-topology", op="EQ", value="2x8")],
    )
    assert pod["spec"]["nodeSelector"]["cloud.google.com/gke-tpu-topology"] == "2x8"


def test_tolerations_come_from_the_cluster_config() -> None:
    config = KubernetesBackendConfig.model_validate(
        {
            "device_tolerations": {
                "gpu": [
                    {"key": "pool", "operator": "Equal", "value": "a100", "effect": "NoSchedule"},
                    {"operator": "Exists"},
                ]
            }
        }
    )
    pod = pod_for(DeviceSpec(type="gpu", count=1), config)
    assert pod["spec"]["tolerations"] == [
        {"key": "pool", "operator": "Equal", "value": "a100", "effect": "NoSchedule"},
        {"operator": "Exists"},
    ]
    with pytest.raises(ValidationError):
        KubernetesBackendConfig.model_validate({"device_tolerations": {"gpu": [{"effect": "Sometimes"}]}})


def test_cpu_pods_get_no_device_tolerations_and_a_gang_knows_its_generation() -> None:
    pod = pod_for(None, gang_generation=3)
    assert "tolerations" not in pod["spec"]
    env = {e["name"]: e["value"] for e in pod["spec"]["containers"][0]["env"]}
    assert env["IRIS_GANG_GENERATION"] == "3" and env["IRIS_NUM_TASKS"] == "1"
