"""What a pod asking for GPUs or TPUs needs beyond its resource limits: the tolerations of the
accelerator node pool, and for TPUs the GKE node selectors that pick the slice type and shape.

A TPU variant is ``GENERATION-SIZE`` as Google names slices (``v5litepod-16``, ``v4-8``) or
``GENERATION-TOPOLOGY`` (``v5litepod-4x4``, ``v4-2x2x2``); a bare generation (``v6e``) selects
the accelerator only. A constraint on either label wins over what is derived here.
"""

from __future__ import annotations

import re
from typing import Any

from iris.cluster.backends.kubernetes.config import KubernetesBackendConfig
from iris.rpc.models import RunSpec

TPU_ACCELERATOR_LABEL = "cloud.google.com/gke-tpu-accelerator"
TPU_TOPOLOGY_LABEL = "cloud.google.com/gke-tpu-topology"
_TOPOLOGY = re.compile(r"^\d+x\d+(x\d+)?$")
# Chips of a slice -> its topology. v5e/v6e names count chips; v4/v5p names count TensorCores (2 per chip).
_TOPOLOGY_2D = {1: "1x1", 4: "2x2", 8: "2x4", 16: "4x4", 32: "4x8", 64: "8x8", 128: "8x16", 256: "16x16"}
_TOPOLOGY_3D = {4: "2x2x1", 8: "2x2x2", 16: "2x2x4", 32: "2x4x4", 64: "4x4x4", 128: "4x4x8", 256: "4x8x8"}
_CORES_PER_CHIP = {"v4": 2, "v5p": 2}


def tpu_node_selector(variant: str, config: KubernetesBackendConfig) -> dict[str, str]:
    """GKE labels of the node pool a TPU variant runs on (empty for an unknown generation)."""
    generation, _, size = variant.lower().partition("-")
    accelerator = config.tpu_accelerators.get(generation)
    if not accelerator:
        return {}
    selector = {TPU_ACCELERATOR_LABEL: accelerator}
    topology = None
    if _TOPOLOGY.match(size):
        topology = size
    elif size.isdigit():
        cores = _CORES_PER_CHIP.get(generation)
        chips = int(size) // cores if cores else int(size)
        topology = (_TOPOLOGY_3D if cores else _TOPOLOGY_2D).get(chips)
    if topology:
        selector[TPU_TOPOLOGY_LABEL] = topology
    return selector


def accelerator_placement(
    spec: RunSpec, config: KubernetesBackendConfig
) -> tuple[dict[str, str], list[dict[str, Any]]]:
    """(node selector, tolerations) for the device the task asks for; labels any constraint names are left out."""
    device = spec.resources.device
    if device is None or device.count <= 0:
        return {}, []
    kind = device.type.lower()
    tolerations = [t.manifest() for t in config.device_tolerations.get(kind, [])]
    selector = tpu_node_selector(device.variant, config) if kind == "tpu" and device.variant else {}
    constrained = {c.key for c in spec.constraints}
    return {k: v for k, v in selector.items() if k not in constrained}, tolerations
