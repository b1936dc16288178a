"""Configuration of the Kubernetes backend (YAML/CLI -> pydantic, unknown keys rejected)."""

from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from iris.rpc.enums import PriorityBand

_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def default_priority_classes() -> dict[PriorityBand, str]:
    return {band: f"iris-{band.value.lower()}" for band in PriorityBand}


class Toleration(BaseModel):
    """A pod toleration, as Kubernetes spells it (``tolerationSeconds`` is left out on purpose)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    key: str | None = Field(
        default=None, max_length=316, description="Taint key; none with `Exists` tolerates every taint."
    )
    operator: Literal["Exists", "Equal"] = Field(
        default="Exists", description="`Equal` also matches the taint's value."
    )
    value: str | None = Field(default=None, max_length=63, description="Taint value (with `Equal`).")
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = Field(
        default=None, description="Taint effect to tolerate (none: every effect)."
    )

    def manifest(self) -> dict[str, str]:
        return self.model_dump(exclude_none=True)


def default_device_tolerations() -> dict[str, list[Toleration]]:
    """The taints GKE (and the NVIDIA GPU operator) put on accelerator node pools."""
    return {
        "gpu": [Toleration(key="nvidia.com/gpu", operator="Exists", effect="NoSchedule")],
        "tpu": [Toleration(key="google.com/tpu", operator="Exists", effect="NoSchedule")],
    }


def default_tpu_accelerators() -> dict[str, str]:
    """TPU generation (the variant's prefix, as in ``v5litepod-8``) -> GKE's accelerator label value."""
    return {
        "v4": "tpu-v4-podslice",
        "v5e": "tpu-v5-lite-podslice",
        "v5litepod": "tpu-v5-lite-podslice",
        "v5p": "tpu-v5p-slice",
        "v6e": "tpu-v6e-slice",
    }


class KubernetesBackendConfig(BaseModel):
    """Where the pods go and what they look like.

    Credentials come from ``kubeconfig`` (+ ``context``), from the pod's service account
    when ``in_cluster`` is set, or from the default kubeconfig lookup (``$KUBECONFIG``,
    ``~/.kube/config``) when neither is given. ``token`` overrides the user credentials of
    whichever config was chosen.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    namespace: str = Field(default="iris", min_length=1, max_length=63)
    local_queue: str = Field(default="iris", min_length=1, max_length=63)
    kubeconfig: str | None = None
    in_cluster: bool = False
    context: str | None = None
    token: str | None = None
    default_image: str = Field(default="python:3.11-slim", min_length=1)
    # Band -> name used both for the pod's PriorityClass and Kueue's WorkloadPriorityClass.
    priority_classes: dict[PriorityBand, str] = Field(default_factory=default_priority_classes)
    service_account: str | None = None
    run_as_user: int | None = Field(
        default=None,
        ge=1,
        le=2**31 - 1,
        description="Run every task container as this non-root uid (and gid), with runAsNonRoot "
        "enforced; unset: the image's user (give one when your images allow it).",
    )
    # Device type of a ResourceSpec -> extended resource name on the node.
    device_resources: dict[str, str] = Field(
        default_factory=lambda: {"gpu": "nvidia.com/gpu", "tpu": "google.com/tpu"}
    )
    device_tolerations: dict[str, list[Toleration]] = Field(
        default_factory=default_device_tolerations,
        description="Tolerations a pod asking for each device type gets: the taints of that node pool.",
    )
    tpu_accelerators: dict[str, str] = Field(
        default_factory=default_tpu_accelerators,
        description="TPU generation (prefix of the variant, as in `v5litepod-8`) to the value of the "
        "`cloud.google.com/gke-tpu-accelerator` node selector; the variant's size or `AxB[xC]` gives "
        "`cloud.google.com/gke-tpu-topology`.",
    )
    host_runner: bool = Field(
        default=False,
        description="Python callables run with the controller's own `iris` and `cloudpickle` (and its "
        "site-packages, last on the path) mounted read-only from the node's filesystem (hostPath), as "
        "the worker backend does in images: only for nodes on the controller's own machine (`iris "
        "cluster start --local --backend kubernetes` on a real node sets it). The image then needs "
        "only a Python 3 of the controller's minor version, not an Iris install.",
    )
    environment_dir: str = Field(
        default="/var/cache/iris/envs",
        pattern=r"^/",
        max_length=1024,
        description="Directory on each node where the environments of jobs with `--pip` packages or "
        "a uv project are built once and reused by later pods of that node: each user's in "
        "`<environment_dir>/users/<user>` (a hostPath volume; a pod mounts only its own user's), "
        "which must be writable by the pods' uid (`run_as_user`).",
    )
    environment_uv: str | None = Field(
        default=None,
        pattern=r"^/",
        max_length=1024,
        description="Path of a uv binary on every node, mounted read-only into the pod that builds an "
        "environment; unset: the `uv` of the task's image (or its `python3 -m uv`).",
    )
    environment_build_env: dict[str, str] = Field(
        default_factory=dict,
        description="Variables of the pod that builds an environment only (not of the task): the "
        "package index and network settings uv needs there, e.g. `UV_INDEX_URL`, `HTTPS_PROXY`, "
        "`SSL_CERT_FILE` (a CA bundle present in the image).",
    )
    environment_offline: bool = Field(
        default=False,
        description="Build environments without the network (`UV_OFFLINE`), from the uv cache in "
        "`<environment_dir>/.uv-cache` that the operator pre-warmed (read-only to builds, copied into "
        "each user's own cache): for air-gapped nodes.",
    )
    terminal_pod_retention_s: float = Field(default=600.0, ge=0)
    # How long a pod may wait on an image pull error (ErrImagePull, ImagePullBackOff) before its
    # attempt ends with failure kind "image" and the pod is deleted (InvalidImageName: at once).
    image_pull_grace_s: float = Field(default=300.0, ge=0)
    # Concurrent API requests used to create/delete pods within one reconcile.
    max_concurrent_requests: int = Field(default=32, ge=1, le=256)
    request_timeout_s: float = Field(default=30.0, gt=0)
    list_page_size: int = Field(default=500, ge=1, le=10_000)

    @model_validator(mode="after")
    def _check(self) -> KubernetesBackendConfig:
        if self.in_cluster and self.kubeconfig:
            raise ValueError("choose either in_cluster or kubeconfig, not both")
        for name in self.environment_build_env:
            if not _ENV_NAME.match(name) or name.startswith("IRIS_"):
                raise ValueError(
                    f"environment_build_env: {name!r} is not a variable name a build may set "
                    "(letters, digits and '_', not IRIS_*)"
                )
        return self

    def priority_class(self, band: PriorityBand) -> str | None:
        return self.priority_classes.get(band)
