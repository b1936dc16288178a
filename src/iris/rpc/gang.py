"""Names and numbers a gang's members agree on without asking anyone (pure, standard library
only: the client inside a task imports this)."""

from __future__ import annotations

import hashlib
from collections.abc import Collection

# Gang coordinator ports: below Linux's ephemeral range (32768-60999), where the workers' own
# ``--port`` allocations and outgoing connections come from, so only an explicit bind takes one.
GANG_PORT_BASE = 20000
GANG_PORT_SPAN = 10000


def gang_port(job_id: str, generation: int) -> int:
    """A port per job and gang generation (a retried gang gets a new one): a Kubernetes pod's,
    which has its own network namespace, and where a worker gang's search starts."""
    digest = hashlib.sha256(f"{job_id}#{generation}".encode()).digest()
    return GANG_PORT_BASE + int.from_bytes(digest[:4], "big") % GANG_PORT_SPAN


def pick_gang_port(job_id: str, generation: int, taken: Collection[int]) -> int:
    """The first port from ``gang_port(job_id, generation)`` on (wrapping within the range) that is
    not in ``taken`` (the coordinator ports of the gangs still holding theirs): two live gangs never
    share one, on one machine or anywhere."""
    start = gang_port(job_id, generation) - GANG_PORT_BASE
    for step in range(GANG_PORT_SPAN):
        port = GANG_PORT_BASE + (start + step) % GANG_PORT_SPAN
        if port not in taken:
            return port
    return GANG_PORT_BASE + start  # every port of the range held by a live gang: share the first


def coordinator_endpoint_name(job_id: str) -> str:
    """The endpoint where task 0 of a multi-task job publishes its coordinator address: one per
    job (endpoints are shared by a whole job tree), within the 128-character name limit."""
    name = "coordinator/" + job_id.strip("/")
    if len(name) > 128:
        name = "coordinator/" + hashlib.sha256(job_id.encode()).hexdigest()[:32]
    return name
