"""Inside a running task: who am I, and a client that submits sub-jobs under my job."""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING
from urllib.parse import urlparse

from iris.rpc.errors import FailedPrecondition

if TYPE_CHECKING:  # imported where used: ``iris.client`` loads this module eagerly
    from iris.client.client import IrisClient
    from iris.rpc.models import EndpointInfo


@dataclass(frozen=True)
class IrisContext:
    job_id: str
    task_id: str
    task_index: int
    attempt_uid: str
    attempt_number: int
    controller_url: str
    worker_id: str | None

    @cached_property
    def client(self) -> IrisClient:
        """Submissions through this client become children of the running job."""
        from iris.client.client import IrisClient

        return IrisClient(self.controller_url, token=os.environ.get("IRIS_TOKEN"), parent_job_id=self.job_id)

    def register_endpoint(
        self, name: str, port: int | str, *, metadata: dict[str, str] | None = None
    ) -> EndpointInfo:
        """Publish ``host:port`` (or a full address) under ``name`` for the rest of the job tree."""
        address = (
            str(port)
            if isinstance(port, str) and ":" in port
            else f"{advertise_host(self.controller_url)}:{int(port)}"
        )
        from iris.rpc.models import EndpointInfo, EndpointRegistration

        reg = EndpointRegistration(
            name=name,
            address=address,
            job_id=self.job_id,
            task_id=self.task_id or None,
            metadata=metadata or {},
        )
        return self.client.http.post("/api/v1/endpoints", EndpointInfo, reg)

    def resolve_endpoint(self, name: str, *, timeout: float = 0.0) -> str:
        return self.client.resolve_endpoint(name, job=self.job_id, timeout=timeout)

    def port(self, name: str) -> int:
        value = os.environ.get(f"IRIS_PORT_{name.upper()}")
        if value is None:
            raise FailedPrecondition(f"this task asked for no port named {name!r}")
        return int(value)


def advertise_host(controller_url: str) -> str:
    """The address other tasks can reach this machine at: loopback for a local cluster."""
    override = os.environ.get("IRIS_ADVERTISE_HOST")
    if override:
        return override
    host = urlparse(controller_url).hostname or ""
    if host in ("127.0.0.1", "localhost", "::1"):
        return "127.0.0.1"
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect((host, 1))  # no packet is sent: this only picks the outgoing interface
            return str(s.getsockname()[0])
    except OSError:
        return socket.gethostname()


def iris_ctx() -> IrisContext:
    """The current task's context; raises FailedPrecondition outside an Iris task."""
    env = os.environ
    if "IRIS_JOB_ID" not in env or "IRIS_CONTROLLER_URL" not in env:
        raise FailedPrecondition("not running inside an Iris task (IRIS_JOB_ID is not set)")
    return IrisContext(
        job_id=env["IRIS_JOB_ID"],
        task_id=env.get("IRIS_TASK_ID", ""),
        task_index=int(env.get("IRIS_TASK_INDEX", "0")),
        attempt_uid=env.get("IRIS_ATTEMPT_UID", ""),
        attempt_number=int(env.get("IRIS_ATTEMPT_NUMBER", "0")),
        controller_url=env["IRIS_CONTROLLER_URL"],
        worker_id=env.get("IRIS_WORKER_ID"),
    )
