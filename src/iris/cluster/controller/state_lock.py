"""One controller per state dir: an exclusive ``flock`` on ``<state>/controller.lock``.

Two controllers on one database would both drive the same workers and kill each other's attempts.
The lock is taken before the database is opened (``python -m iris.cluster.controller`` takes it
before importing anything heavy), so a second one is refused at once, with the holder's pid (the
file holds it). The kernel drops the lock when its holder dies, even by ``kill -9``: a stale lock
file is free again. Standard library only.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

LOCK_NAME = "controller.lock"
_held: dict[str, int] = {}  # state dir -> the fd holding its lock (kept open for the process's life)


class StateDirInUse(Exception):
    """Another live controller holds the state dir; one sentence naming the dir and its pid."""


def lock_state_dir(state_dir: Path) -> None:
    """Hold ``state_dir`` for this process (a no-op when it already does); StateDirInUse if taken."""
    state_dir = Path(state_dir).expanduser().absolute()
    if str(state_dir) in _held:
        return
    state_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    # Close-on-exec: a process this controller starts must not keep the dir locked after it dies.
    fd = os.open(state_dir / LOCK_NAME, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = _read_pid(fd)
        os.close(fd)
        raise StateDirInUse(in_use_message(state_dir, holder)) from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    _held[str(state_dir)] = fd


def holder_of(state_dir: Path) -> int | None:
    """The pid of the controller holding ``state_dir`` (0 if it wrote none yet), None when free."""
    path = Path(state_dir).expanduser() / LOCK_NAME
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return _read_pid(fd)
    finally:
        os.close(fd)  # drops a lock taken just now
    return None


def in_use_message(state_dir: Path, pid: int | None) -> str:
    who = f"pid {pid}" if pid else "a process that is still starting"
    return (
        f"the state dir {state_dir} is in use by another controller ({who}): stop it first, "
        "or give this one another state dir"
    )


def _read_pid(fd: int) -> int:
    try:
        text = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
    except OSError:
        return 0
    return int(text) if text.isdigit() else 0


def lock_from_argv(argv: list[str]) -> None:
    """``python -m iris.cluster.controller``: lock an explicit ``--state-dir`` before the heavy
    imports; print the sentence and exit 1 when it is in use. (``run`` locks the resolved dir.)"""
    state_dir = None
    for i, arg in enumerate(argv):
        if arg == "--state-dir" and i + 1 < len(argv):
            state_dir = argv[i + 1]
        elif arg.startswith("--state-dir="):
            state_dir = arg.split("=", 1)[1]
    if state_dir is None:
        return
    try:
        lock_state_dir(Path(state_dir))
    except StateDirInUse as exc:
        os.write(2, f"error: {exc}\n".encode())
        raise SystemExit(1) from None
    except OSError:
        return  # run() reports an unusable state dir in its own words
