"""The Iris Python SDK.

Names are imported on first use (PEP 562), so a command that only reads a job's logs does not pay
for the local cluster or the workspace packer.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

# Light, and imported now: the function ``distributed`` shares its name with its module, and
# importing the module later would leave the package attribute pointing at the module.
from iris.client.context import IrisContext, iris_ctx
from iris.client.distributed import Distributed, distributed

if TYPE_CHECKING:
    from iris.client.client import IrisClient
    from iris.client.job import Job, JobFailed, JobTimeout
    from iris.client.local_cluster import LocalCluster
    from iris.rpc.enums import JobState, PriorityBand, TaskState
    from iris.rpc.models import (
        Constraint,
        CoschedulingConfig,
        DeviceSpec,
        Entrypoint,
        EnvironmentSpec,
        ResourceSpec,
    )

_WHERE = {
    "IrisClient": "iris.client.client",
    "Job": "iris.client.job",
    "JobTimeout": "iris.client.job",
    "JobFailed": "iris.client.job",
    "LocalCluster": "iris.client.local_cluster",
    "JobState": "iris.rpc.enums",
    "PriorityBand": "iris.rpc.enums",
    "TaskState": "iris.rpc.enums",
    "Constraint": "iris.rpc.models",
    "CoschedulingConfig": "iris.rpc.models",
    "DeviceSpec": "iris.rpc.models",
    "Entrypoint": "iris.rpc.models",
    "EnvironmentSpec": "iris.rpc.models",
    "ResourceSpec": "iris.rpc.models",
    "SecretRef": "iris.rpc.models",
}

__all__ = [
    "Constraint",
    "CoschedulingConfig",
    "DeviceSpec",
    "Distributed",
    "Entrypoint",
    "EnvironmentSpec",
    "IrisClient",
    "IrisContext",
    "Job",
    "JobState",
    "JobFailed",
    "JobTimeout",
    "LocalCluster",
    "PriorityBand",
    "ResourceSpec",
    "SecretRef",
    "TaskState",
    "distributed",
    "iris_ctx",
]


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'iris.client' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__
