"""Names and numbers a gang's members agree on without asking anyone (pure, standard library
only: the client inside a task imports this)."""

from __future__ import annotations

import hashlib

# A gang's coordinator port when Iris cannot ask task 0's machine (a Kubernetes pod has its own
# network namespace, so any port is free there): below Linux's ephemeral range (32768-60999),
# per job and gang generation, so a retried gang gets a new one.
GANG_PORT_BASE = 20000
GANG_PORT_SPAN = 10000


def gang_port(job_id: str, generation: int) -> int:
    digest = hashlib.sha256(f"{job_id}#{generation}".encode()).digest()
    return GANG_PORT_BASE + int.from_bytes(digest[:4], "big") % GANG_PORT_SPAN


def coordinator_endpoint_name(job_id: str) -> str:
    """The endpoint where task 0 of a multi-task job publishes its coordinator address: one per
    job (endpoints are shared by a whole job tree), within the 128-character name limit."""
    name = "coordinator/" + job_id.strip("/")
    if len(name) > 128:
        name = "coordinator/" + hashlib.sha256(job_id.encode()).hexdigest()[:32]
    return name
