"""Child processes of the control plane: each in its own process group, logging to a file."""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")
_PR_SET_PDEATHSIG = 1


class StartupError(RuntimeError):
    """A component did not become ready; the message names it and quotes its log's tail."""


def _die_with_parent() -> None:
    """preexec_fn: the child gets SIGKILL when the process that started it exits."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def launch(
    name: str,
    argv: Sequence[str],
    log_dir: Path,
    *,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
    tied_to_parent: bool = False,
) -> subprocess.Popen[bytes]:
    """Start ``argv`` in a new session; stdout and stderr go to ``log_dir/<name>.log``."""
    log_dir.mkdir(parents=True, exist_ok=True)
    with (log_dir / f"{name}.log").open("ab") as log:
        return subprocess.Popen(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=dict(env) if env is not None else None,
            cwd=cwd,
            start_new_session=True,
            preexec_fn=_die_with_parent if tied_to_parent else None,
        )


def log_tail(log_dir: Path, name: str, lines: int = 25) -> str:
    path = log_dir / f"{name}.log"
    if not path.exists():
        return "(no log)"
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie child of ours counts as gone
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return True
    return state != "Z"


def stop_group(pid: int, *, grace: float = 10.0) -> None:
    """SIGTERM the process group led by ``pid``, SIGKILL it after ``grace`` seconds."""
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(pid, sig)
        except (ProcessLookupError, PermissionError):
            return
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            try:
                os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                pass
            if not alive(pid):
                return
            time.sleep(0.05)


def wait_for(
    condition: Callable[[], T | None],
    *,
    timeout: float,
    what: str,
    check_alive: Callable[[], None] | None = None,
    interval: float = 0.2,
) -> T:
    """Poll ``condition`` until truthy; ``check_alive`` raises early when a component died."""
    deadline = time.monotonic() + timeout
    last_error = ""
    while time.monotonic() < deadline:
        if check_alive is not None:
            check_alive()
        try:
            result = condition()
        except Exception as exc:  # a component not yet answering: keep polling
            result, last_error = None, f"{type(exc).__name__}: {exc}"
        if result:
            return result
        time.sleep(interval)
    suffix = f" (last error: {last_error})" if last_error else ""
    raise StartupError(f"timed out after {timeout:.0f}s waiting for {what}{suffix}")
