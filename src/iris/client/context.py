"""Inside a running task: who am I, and a client that submits sub-jobs under my job."""

from __future__ import annotations

import os
from dataclasses import dataclass
from functools import cached_property

from iris.client.client import IrisClient
from iris.rpc.errors import FailedPrecondition


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
        return IrisClient(self.controller_url, token=os.environ.get("IRIS_TOKEN"), parent_job_id=self.job_id)

    def port(self, name: str) -> int:
        value = os.environ.get(f"IRIS_PORT_{name.upper()}")
        if value is None:
            raise FailedPrecondition(f"this task asked for no port named {name!r}")
        return int(value)


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
