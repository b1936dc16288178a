"""The Iris Python SDK."""

from iris.client.client import IrisClient
from iris.client.context import IrisContext, iris_ctx
from iris.client.distributed import Distributed, distributed
from iris.client.job import Job, JobTimeout
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
    "JobTimeout",
    "LocalCluster",
    "PriorityBand",
    "ResourceSpec",
    "TaskState",
    "distributed",
    "iris_ctx",
]
