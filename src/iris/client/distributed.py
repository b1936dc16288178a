"""``iris.client.distributed()``: who coordinates a multi-task job, which rank this task is, how many.

Task 0 publishes ``host:port`` as an endpoint of its job; every other task waits for it. In a
gang the endpoint names the gang's generation, so after a retry of the whole gang nobody dials
the coordinator of the previous try. The result feeds ``jax.distributed.initialize`` or
``torch.distributed.init_process_group`` directly::

    d = iris.client.distributed()
    jax.distributed.initialize(d.coordinator_address, d.num_processes, d.process_id)
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

from iris.client.context import advertise_host, iris_ctx
from iris.rpc.errors import FailedPrecondition
from iris.rpc.gang import coordinator_endpoint_name
from iris.rpc.ports import free_port

COORDINATOR_PORT_NAME = "coordinator"
_POLL_S = 0.1


@dataclass(frozen=True)
class Distributed:
    coordinator_address: str  # host:port where process 0 serves (JAX coordinator, torch master)
    process_id: int
    num_processes: int

    @property
    def host(self) -> str:
        return self.coordinator_address.rpartition(":")[0]

    @property
    def port(self) -> int:
        return int(self.coordinator_address.rpartition(":")[2])

    @property
    def torch_env(self) -> dict[str, str]:
        """``MASTER_ADDR``/``MASTER_PORT``/``RANK``/``WORLD_SIZE`` for torch's ``env://`` init."""
        return {
            "MASTER_ADDR": self.host,
            "MASTER_PORT": str(self.port),
            "RANK": str(self.process_id),
            "WORLD_SIZE": str(self.num_processes),
        }


def distributed(timeout: float = 300.0) -> Distributed:
    """The coordinator, this task's rank and the task count; waits up to ``timeout`` for task 0.

    A gang member on the WORKER backend gets the address Iris chose (``$IRIS_COORDINATOR_ADDRESS``,
    also set as ``JAX_COORDINATOR_ADDRESS`` and ``MASTER_ADDR``/``MASTER_PORT``) and returns at once.
    Otherwise process 0 listens on the job's port named ``coordinator`` when it asked for one (``ports=
    ["coordinator"]`` / ``--port coordinator``), else on a port free when this is called.
    Raises FailedPrecondition outside an Iris task and TimeoutError when task 0 never shows.
    """
    ctx = iris_ctx()
    env = os.environ
    try:
        num = int(env.get("IRIS_NUM_TASKS", "1"))
    except ValueError:
        raise FailedPrecondition(f"IRIS_NUM_TASKS is not a number: {env.get('IRIS_NUM_TASKS')!r}") from None
    rank = ctx.task_index
    given = env.get("IRIS_COORDINATOR_ADDRESS")
    if given:  # a gang member on a worker: Iris chose the coordinator before the gang started
        return Distributed(given, rank, num)
    generation = env.get("IRIS_GANG_GENERATION", "")
    if rank == 0 or num <= 1:
        raw_port = env.get(f"IRIS_PORT_{COORDINATOR_PORT_NAME.upper()}")
        port = int(raw_port) if raw_port else free_port("")
        address = f"{advertise_host(ctx.controller_url)}:{port}"
        if num > 1:
            ctx.register_endpoint(
                coordinator_endpoint_name(ctx.job_id),
                address,
                metadata={
                    "generation": generation,
                    "attempt_uid": ctx.attempt_uid,
                    "num_processes": str(num),
                },
            )
        return Distributed(address, rank, num)
    name = coordinator_endpoint_name(ctx.job_id)
    deadline = time.monotonic() + timeout
    while True:
        for endpoint in ctx.client.endpoints(job=ctx.job_id, name=name).endpoints:
            if endpoint.job_id == ctx.job_id and endpoint.metadata.get("generation", "") == generation:
                return Distributed(endpoint.address, rank, num)
        if time.monotonic() >= deadline:
            raise TimeoutError(
                f"task 0 of {ctx.job_id} registered no coordinator within {timeout:g}s"
                + (f" (gang generation {generation})" if generation else "")
            )
        time.sleep(_POLL_S)
