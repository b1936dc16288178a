"""A daemon's state dir is its own: the directory and every directory in it 0700, every file 0600.

The controller's holds the database (every user's environment, the job-token signing secret),
its WAL, the log store, keys and bundles; a worker's holds logs, pid records and bundles. Both
daemons set the umask to 077 at start-up, so what they create later is private from birth, and
``make_private`` repairs an install made before (0755 directories, 0644 files) once at start.
Imports only the standard library: it runs before anything heavy.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable
from pathlib import Path

PRIVATE_UMASK = 0o077
# What a task's processes are given: the usual umask, not the daemon's (their files are theirs).
TASK_UMASK = 0o022


def private_umask() -> None:
    """From now on this process creates files 0600 and directories 0700 unless told otherwise."""
    os.umask(PRIVATE_UMASK)


def make_private(root: Path, *, keep: Iterable[Path] = ()) -> None:
    """Create ``root`` (0700) if needed, then make it and everything in it private: directories
    0700, files 0600 (an executable bit of the owner stays). Symlinks are not followed. The
    directories in ``keep`` (work dirs and environments handed to tasks) keep their own modes and
    are not entered."""
    root.mkdir(mode=0o700, parents=True, exist_ok=True)
    kept = {os.path.abspath(p) for p in keep}
    _tighten(str(root), 0o700)
    for current, dirs, files in os.walk(root):
        for name in list(dirs):
            path = os.path.join(current, name)
            if path in kept:
                dirs.remove(name)
                continue
            _tighten(path, 0o700)
        for name in files:
            _tighten(os.path.join(current, name), 0o600)


def _tighten(path: str, mode: int) -> None:
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return
    if stat.S_ISLNK(info.st_mode):
        return
    current = stat.S_IMODE(info.st_mode)
    wanted = mode | (current & 0o100)
    if current != wanted:
        os.chmod(path, wanted)
