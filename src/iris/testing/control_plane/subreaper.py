"""Run one command as a child subreaper: orphans of its tree (containerd's shims and the containers
they start) are re-parented here instead of to PID 1, which on these machines does not reap them.

    python -m iris.testing.control_plane.subreaper -- containerd --config FILE

SIGTERM/SIGINT go to the command; once it has exited, every remaining descendant gets SIGTERM,
then SIGKILL after ``--grace`` seconds, and all are reaped before this process exits with the
command's exit status.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

_PR_SET_PDEATHSIG = 1
_PR_SET_CHILD_SUBREAPER = 36


def _children() -> list[int]:
    pids: list[int] = []
    for task in Path(f"/proc/{os.getpid()}/task").iterdir():
        try:
            pids += [int(p) for p in (task / "children").read_text().split()]
        except OSError:
            continue
    return pids


def _reap() -> None:
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def _kill_all(sig: int) -> None:
    for pid in _children():
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="subreaper")
    parser.add_argument("--grace", type=float, default=3.0)
    parser.add_argument(
        "--die-with-parent", action="store_true", help="stop (as on SIGTERM) when the parent process exits"
    )
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("a command to run is required")
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        print("subreaper: prctl(PR_SET_CHILD_SUBREAPER) failed", file=sys.stderr)
        return 1
    if args.die_with_parent:
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    main_child = subprocess.Popen(command)
    stopping = False

    def forward(signum: int, _frame: object) -> None:
        nonlocal stopping
        stopping = True
        if main_child.poll() is None:
            main_child.send_signal(signum)

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    while main_child.poll() is None:
        time.sleep(0.2)
        _reap_others(main_child.pid)
    _kill_all(signal.SIGTERM)
    deadline = time.monotonic() + args.grace
    while _children() and time.monotonic() < deadline:
        _reap()
        time.sleep(0.05)
    while _children():
        _kill_all(signal.SIGKILL)
        _reap()
        time.sleep(0.05)
    _reap()
    code = main_child.returncode
    return (
        0
        if stopping and code in (0, -signal.SIGTERM, -signal.SIGINT)
        else (code if code >= 0 else 128 - code)
    )


def _reap_others(main_pid: int) -> None:
    """Reap re-parented orphans that exited, never the main child (Popen owns its status)."""
    for pid in _children():
        if pid == main_pid:
            continue
        try:
            os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            pass


if __name__ == "__main__":
    sys.exit(main())
