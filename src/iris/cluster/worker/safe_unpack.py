"""Unpack a workspace bundle without ever writing outside the destination.

``tarfile``'s ``filter="data"`` has been bypassed (CVE-2025-4517: a long chain of nested
symlinks makes its path check and the kernel disagree), so it is not trusted here. A workspace
bundle only ever holds regular files and directories (the client stores a symlink to a file as
that file's content), so anything else (symlink, hard link, device, fifo) is refused, and every
file is created by this code: a relative, normalised name, parent directories made here, and
``O_NOFOLLOW | O_EXCL`` on the final open, after checking the real path of its parent.
"""

from __future__ import annotations

import os
import stat
import tarfile
from collections.abc import Callable
from pathlib import Path, PurePosixPath

# A workspace unpacks to at most this much and this many entries (files and directories): a
# small archive of zeros or of empty files must not fill a worker's disk or its inodes.
MAX_MEMBERS = 1_000_000
MAX_BYTES = 10 * 1000**3
_COPY_CHUNK = 1 << 20


class UnsafeBundle(ValueError):
    """The archive holds a member that is not allowed, or is over a bound; one sentence."""


class UnpackCancelled(Exception):
    """``cancelled()`` answered True: the attempt ended while its bundle was being unpacked."""


def safe_unpack(
    archive: Path,
    destination: Path,
    *,
    max_bytes: int | None = MAX_BYTES,
    max_entries: int = MAX_MEMBERS,
    cancelled: Callable[[], bool] | None = None,
) -> int:
    """Extract regular files and directories of a ``.tar.gz`` into ``destination`` (an existing
    directory); returns the file count. Raises UnsafeBundle (over ``max_bytes`` or ``max_entries``
    too), UnpackCancelled, tarfile.TarError or OSError."""
    root = Path(os.path.realpath(destination))
    files = 0
    total = 0
    with tarfile.open(archive, mode="r:gz") as tar:
        for count, member in enumerate(tar, start=1):
            if cancelled is not None and cancelled():
                raise UnpackCancelled()
            if count > max_entries:
                raise UnsafeBundle(f"the bundle has more than {max_entries} entries (files and directories)")
            parts = _relative_parts(member.name)
            if member.isdir():
                if parts:
                    _make_dirs(root, parts)
                continue
            if not member.isreg():
                kind = "link" if member.issym() or member.islnk() else "special file"
                raise UnsafeBundle(
                    f"the bundle holds a {kind} ({member.name!r}): only files and directories are allowed"
                )
            if not parts:
                raise UnsafeBundle(f"the bundle holds a file with no name ({member.name!r})")
            total += member.size
            if max_bytes is not None and total > max_bytes:
                raise UnsafeBundle(f"the bundle unpacks to more than {max_bytes} bytes")
            parent = _make_dirs(root, parts[:-1])
            source = tar.extractfile(member)
            if source is None:
                raise UnsafeBundle(f"the bundle member {member.name!r} has no content")
            mode = 0o755 if member.mode & 0o111 else 0o644
            fd = os.open(
                os.path.join(parent, parts[-1]),
                os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                mode,
            )
            with os.fdopen(fd, "wb") as out:
                while chunk := source.read(_COPY_CHUNK):
                    if cancelled is not None and cancelled():
                        raise UnpackCancelled()
                    out.write(chunk)
            files += 1
    return files


def _relative_parts(name: str) -> tuple[str, ...]:
    if "\x00" in name or "\\" in name:
        raise UnsafeBundle(f"the bundle member name {name!r} is not a plain path")
    path = PurePosixPath(name)
    if path.is_absolute():
        raise UnsafeBundle(f"the bundle member {name!r} has an absolute path")
    parts = tuple(p for p in path.parts if p not in ("", "."))
    if ".." in parts:
        raise UnsafeBundle(f"the bundle member {name!r} points outside the work dir")
    return parts


def _make_dirs(root: Path, parts: tuple[str, ...]) -> str:
    """Create ``root/parts...`` one level at a time, refusing anything that is not a real directory."""
    current = str(root)
    for part in parts:
        current = os.path.join(current, part)
        try:
            os.mkdir(current, 0o755)
        except FileExistsError:
            pass
        info = os.lstat(current)
        if not stat.S_ISDIR(info.st_mode):
            raise UnsafeBundle(f"the bundle path {current!r} is not a directory")
    if os.path.commonpath([os.path.realpath(current), str(root)]) != str(root):
        raise UnsafeBundle("the bundle points outside the work dir")
    return current
