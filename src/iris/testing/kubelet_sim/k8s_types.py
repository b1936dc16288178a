"""The few Kubernetes API names and formats the node agent needs of its own."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

# What the agent's Nodes report as kubelet version (the real plane accepts any).
NODE_AGENT_VERSION = "v1.37.2-iris-node-agent"


@dataclass(frozen=True)
class ResourceType:
    """A core/v1 namespaced resource the agent reads for a pod (``/api/v1/namespaces/N/<plural>/NAME``)."""

    plural: str


CONFIGMAPS = ResourceType("configmaps")
SECRETS = ResourceType("secrets")


def utc_timestamp(offset_seconds: float = 0) -> str:
    moment = dt.datetime.now(dt.UTC) + dt.timedelta(seconds=offset_seconds)
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")
