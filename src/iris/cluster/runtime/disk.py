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
# Below this many free inodes, the attempt holding the most files is failed.
MIN_FREE_INODES = 4096
# Every DISK failure's message starts so (the controller's diagnosis names the kind from it).
DISK_PREFIX = "out of disk: "


def dir_usage(path: str | Path) -> int:
    """Bytes allocated under ``path`` (links not followed; files vanishing meanwhile are skipped)."""
    return dir_usage_and_entries(path)[0]


def dir_usage_and_entries(path: str | Path) -> tuple[int, int]:
    """Bytes allocated under ``path`` and how many files and directories (inodes) it holds."""
    total = entries = 0
    for root, dirs, files in os.walk(path, onerror=lambda _: None):
        for name in (*dirs, *files):
            try:
                total += os.lstat(os.path.join(root, name)).st_blocks * 512
                entries += 1
            except OSError:
                continue
    return total, entries


def free_inodes(path: str | Path) -> int | None:
    """Free inodes of the file system under ``path``; None where it has no fixed count (btrfs)."""
    try:
        fs = os.statvfs(path)
    except OSError:
        return None
    return fs.f_favail if fs.f_files > 0 else None


@dataclass(frozen=True, slots=True)
class DiskView:
    attempt_uid: str
    used_bytes: int  # its work dir and its log
    request_bytes: int  # 0: the job asked for no disk
    entries: int = 0  # files and directories in its work dir


def decide_disk(
    views: Iterable[DiskView],
    free_bytes: int,
    min_free_bytes: int = MIN_FREE_DISK_BYTES,
    free_inode_count: int | None = None,
    min_free_inodes: int = MIN_FREE_INODES,
) -> list[Enforcement]:
    """Attempts to fail now: every one over its request; if none is and the disk is full anyway,
    the one using the most; if it is out of inodes, the one holding the most files."""
    views = list(views)
    out = [
        Enforcement(
            v.attempt_uid,
            KillReason.DISK,
            f"{DISK_PREFIX}used {format_bytes(v.used_bytes)} of disk, over its request of {format_bytes(v.request_bytes)}",
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
                    f"{DISK_PREFIX}the worker's disk is full ({format_bytes(free_bytes)} free) and this "
                    f"attempt uses the most of it ({format_bytes(biggest.used_bytes)})",
                )
            )
    if not out and free_inode_count is not None and free_inode_count < min_free_inodes:
        most = max(views, key=lambda v: v.entries, default=None)
        if most is not None and most.entries > 0:
            out.append(
                Enforcement(
                    most.attempt_uid,
                    KillReason.DISK,
                    f"{DISK_PREFIX}the worker's disk is out of inodes ({free_inode_count} free) and this "
                    f"attempt holds the most files ({most.entries})",
                )
            )
    return out
