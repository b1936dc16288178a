"""Build the platform a cluster config names."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

from iris.cluster.config import PlatformConfig
from iris.cluster.platforms.base import Platform
from iris.cluster.platforms.fake import FakePlatform
from iris.cluster.platforms.local import LocalPlatform
from iris.cluster.platforms.manual import ManualPlatform
from iris.rpc.errors import InvalidArgument


def make_platform(
    config: PlatformConfig,
    state_dir: str | Path,
    *,
    registered_workers: Callable[[], Iterable[tuple[str, str]]] = lambda: (),
    reregister_after_s: float | None = None,
    worker_env: Mapping[str, str] | None = None,
    clock: Callable[[], float] = time.time,
) -> Platform:
    """``state_dir`` is where the local platform keeps slice records and worker logs;
    ``registered_workers`` feeds the manual platform's view of which hosts have a worker."""
    if config.kind == "local":
        env = {**os.environ, **(worker_env or {})}
        return LocalPlatform(state_dir, env=env, reregister_after_s=reregister_after_s, clock=clock)
    if config.kind == "manual":
        assert config.manual is not None  # guaranteed by PlatformConfig validation
        return ManualPlatform(config.manual.hosts, registered_workers, clock=clock)
    if config.kind == "fake":
        return FakePlatform(clock=clock)
    raise InvalidArgument(f"unknown platform kind {config.kind!r}: use local, manual or fake")
