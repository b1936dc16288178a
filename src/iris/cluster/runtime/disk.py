"""Disk use of attempts: measure each work dir, fail the attempt over its ``disk`` request, and
when the worker's disk is full, fail the attempt that uses the most of it (not an innocent one)."""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from iris.cluster.runtime.policy import Enforcement, KillReason
from iris.rpc.units import format_bytes

# Below this much free space on the worker's disk, the biggest attempt is failed.
MIN_FREE_DISK_BYTES = 32 * 1024 * 1024


def dir_usage(path: str | Path) -> int:
    """Bytes allocated under ``path`` (links not followed; files vanishing meanwhile are skipped)."""
    total = 0
    for root, dirs, files in os.walk(path, onerror=lambda _: None):
        for name in (*dirs, *files):
            try:
                total += os.lstat(os.path.join(root, name)).st_blocks * 512
            except OSError:
                continue
    return total


@dataclass(frozen=True, slots=True)
class DiskView:
    attempt_uid: str
    used_bytes: int
    request_bytes: int  # 0: the job asked for no disk


def decide_disk(
    views: Iterable[DiskView], free_bytes: int, min_free_bytes: int = MIN_FREE_DISK_BYTES
) -> list[Enforcement]:
    """Attempts to fail now: every one over its request; if none is and the disk is full anyway,
    the one using the most."""
    views = list(views)
    out = [
        Enforcement(
            v.attempt_uid,
            KillReason.DISK,
            f"used {format_bytes(v.used_bytes)} of disk, over its request of {format_bytes(v.request_bytes)}",
        )
        for v in views
        if v.request_bytes > 0 and v.used_bytes > v.request_bytes
    ]
    if not out and free_bytes < min_free_bytes:
        biggest = max(views, key=lambda v: v.used_bytes, default=None)
        if biggest is not None and biggest.used_bytes > 0:
            out.append(
                Enforcement(
                    biggest.attempt_uid,
                    KillReason.DISK,
                    f"the worker's disk is full ({format_bytes(free_bytes)} free) and this attempt "
                    f"uses the most of it ({format_bytes(biggest.used_bytes)})",
                )
            )
    return out
