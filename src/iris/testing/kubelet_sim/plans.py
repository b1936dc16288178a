"""What to run for a pod: a ContainerPlan per container, built the way the kubelet would.

Used by the node agent for the real API server; ``lookup`` fetches
ConfigMaps and Secrets from whichever API server the caller talks to.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from iris.testing.kubelet_sim.container_env import (
    ContainerConfigError,
    Lookup,
    build_environment,
    container_argv,
)
from iris.testing.kubelet_sim.mounts import container_mounts, to_host
from iris.testing.kubelet_sim.quantity import parse_quantity
from iris.testing.kubelet_sim.runner import ContainerPlan


def container_plan(
    pod: dict[str, Any],
    container: dict[str, Any],
    cwd: Path,
    volumes: Mapping[str, Path],
    lookup: Lookup,
    *,
    host_env_passthrough: Sequence[str],
    image_pull_backoff_after: float,
) -> ContainerPlan:
    image = str(container.get("image", ""))
    base = {k: os.environ[k] for k in host_env_passthrough if k in os.environ}
    base.update(HOME=str(cwd), HOSTNAME=pod["metadata"]["name"])
    limits = (container.get("resources") or {}).get("limits") or {}
    memory_limit = int(parse_quantity(limits["memory"])) if "memory" in limits else None
    deadline = (pod.get("spec") or {}).get("activeDeadlineSeconds")
    failure: tuple[str, str] | None = None
    env: dict[str, str] = base
    if "does-not-exist" in image:
        failure = (
            "ErrImagePull",
            f'failed to pull and unpack image "{image}": failed to resolve reference "{image}": not found',
        )
    else:
        try:
            env = build_environment(pod, container, base, lookup)
        except ContainerConfigError as exc:
            failure = ("CreateContainerConfigError", str(exc))
    mounts = container_mounts(container, volumes)
    env = {k: to_host(v, mounts) for k, v in env.items()}
    workdir = container.get("workingDir")
    return ContainerPlan(
        argv=[to_host(a, mounts) for a in container_argv(container, env)],
        env=env,
        cwd=Path(to_host(workdir, mounts)) if workdir and to_host(workdir, mounts) != workdir else cwd,
        image=image,
        memory_limit_bytes=memory_limit,
        active_deadline_seconds=int(deadline) if deadline is not None else None,
        failure=failure,
        image_pull_backoff_after=image_pull_backoff_after,
        name=str(container.get("name", "")),
    )


def pod_plan(
    pod: dict[str, Any],
    cwd: Path,
    volumes: Mapping[str, Path],
    lookup: Lookup,
    *,
    host_env_passthrough: Sequence[str],
    image_pull_backoff_after: float,
) -> ContainerPlan:
    """The first container's plan, with the init containers to run before it."""

    def plan(container: dict[str, Any]) -> ContainerPlan:
        return container_plan(
            pod,
            container,
            cwd,
            volumes,
            lookup,
            host_env_passthrough=host_env_passthrough,
            image_pull_backoff_after=image_pull_backoff_after,
        )

    inits = [plan(c) for c in pod["spec"].get("initContainers") or []]
    main = plan(pod["spec"]["containers"][0])
    return dataclasses.replace(main, init=inits) if main.failure is None else main
