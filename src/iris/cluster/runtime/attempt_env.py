"""The environment and named ports an attempt process starts with."""

from __future__ import annotations

import re
import socket
from collections.abc import Iterable, Mapping

from iris.rpc.models import RunSpec

_NOT_ENV_SAFE = re.compile(r"[^A-Z0-9_]")


def port_env_name(port_name: str) -> str:
    """``IRIS_PORT_<NAME>``: upper case, anything outside [A-Z0-9_] becomes '_'."""
    return "IRIS_PORT_" + _NOT_ENV_SAFE.sub("_", port_name.upper())


def build_attempt_env(
    base: Mapping[str, str],
    spec: RunSpec,
    *,
    controller_url: str,
    worker_id: str,
    ports: Mapping[str, int],
    work_dir: str,
) -> dict[str, str]:
    """Worker env, a gang's distributed-training variables, job env, secrets, then the IRIS_*
    contract (which a job cannot override)."""
    env = dict(base)
    env.update(distributed_env(spec))
    env.update(spec.env)
    if spec.environment is not None:
        env.update(spec.environment.env_vars)
    env.update(spec.secret_env)
    env["PWD"] = work_dir
    env.update(task_contract_env(spec, controller_url))
    env["IRIS_WORKER_ID"] = worker_id
    for name, port in ports.items():
        env[port_env_name(name)] = str(port)
    return env


def task_contract_env(spec: RunSpec, controller_url: str) -> dict[str, str]:
    """The IRIS_* variables every task gets, whatever runs it (a process, a container, a pod)."""
    env = {
        "IRIS_CONTROLLER_URL": controller_url,
        "IRIS_JOB_ID": spec.job_id,
        "IRIS_TASK_ID": spec.task_id,
        "IRIS_TASK_INDEX": str(spec.task_index),
        "IRIS_NUM_TASKS": str(spec.replicas),
        "IRIS_ATTEMPT_UID": spec.attempt_uid,
        "IRIS_ATTEMPT_NUMBER": str(spec.attempt_number),
    }
    if spec.gang_generation is not None:
        env["IRIS_GANG_GENERATION"] = str(spec.gang_generation)
    return env


def distributed_env(spec: RunSpec) -> dict[str, str]:
    """What ``jax.distributed.initialize()`` and ``torch.distributed.init_process_group()`` read
    (torchrun's names), for a member of a gang: one process per task, task 0 coordinates."""
    if spec.gang_coordinator is None or spec.gang_size is None:
        return {}
    host, _, port = spec.gang_coordinator.rpartition(":")
    return {
        "IRIS_COORDINATOR_ADDRESS": spec.gang_coordinator,
        "JAX_COORDINATOR_ADDRESS": spec.gang_coordinator,
        "MASTER_ADDR": host,
        **gang_rank_env(spec.task_index, spec.gang_size, int(port)),
    }


def coordinator_port_in_use(spec: RunSpec) -> str | None:
    """For task 0 of a gang on a worker: why the gang's coordinator port (chosen by the controller,
    never shared by two live gangs) cannot be listened on here, or None when it is free. Another
    program holding it fails the attempt at once with that reason; the gang's retry gets another."""
    if spec.task_index != 0 or spec.gang_coordinator is None:
        return None
    port = int(spec.gang_coordinator.rpartition(":")[2])
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as a coordinator binds it
        try:
            sock.bind(("", port))
        except OSError as exc:
            return (
                f"the gang's coordinator port {port} is in use on this machine by another program"
                f" ({exc.strerror or exc}); the gang's next try gets another port"
            )
    return None


def gang_rank_env(rank: int, size: int, port: int) -> dict[str, str]:
    """The distributed variables that do not name the coordinator's host."""
    return {
        "JAX_NUM_PROCESSES": str(size),
        "JAX_PROCESS_ID": str(rank),
        "MASTER_PORT": str(port),
        "WORLD_SIZE": str(size),
        "RANK": str(rank),
        "LOCAL_RANK": "0",
        "LOCAL_WORLD_SIZE": "1",
        "NODE_RANK": str(rank),
        "GROUP_RANK": str(rank),
    }


def allocate_ports(names: Iterable[str], taken: set[int]) -> dict[str, int]:
    """A free TCP port per name, distinct from ``taken`` (ports held by this worker's live attempts)."""
    ports: dict[str, int] = {}
    for name in names:
        if name in ports:
            continue
        while True:
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
                sock.bind(("", 0))
                port = sock.getsockname()[1]
            if port not in taken and port not in ports.values():
                ports[name] = port
                break
    return ports
