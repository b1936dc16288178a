"""Looking inside a running attempt: its process tree, and running a command beside it."""

from __future__ import annotations

import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import psutil

from iris.cluster.runtime.private_state import TASK_UMASK


def describe_processes(pid: int | None) -> list[dict[str, Any]]:
    """The attempt's main process and its descendants, with what a person checks first."""
    if pid is None:
        return []
    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.Error:
        return []
    out = []
    for p in procs:
        try:
            with p.oneshot():
                out.append(
                    {
                        "pid": p.pid,
                        "ppid": p.ppid(),
                        "status": p.status(),
                        "command": " ".join(p.cmdline())[:500] or p.name(),
                        "rss_bytes": p.memory_info().rss,
                        "cpu_seconds": round(sum(p.cpu_times()[:2]), 3),
                        "threads": p.num_threads(),
                    }
                )
        except psutil.Error:
            continue  # exited while we looked
    return out


def run_beside(
    argv: Sequence[str], *, cwd: str | Path, env: Mapping[str, str], timeout_s: float
) -> dict[str, Any]:
    """Run ``argv`` in the attempt's working directory with its environment; output is capped."""
    try:
        done = subprocess.run(
            list(argv),
            cwd=cwd,
            env=dict(env),
            capture_output=True,
            timeout=timeout_s,
            stdin=subprocess.DEVNULL,
            umask=TASK_UMASK,
        )
    except FileNotFoundError:
        return {"exit_code": 127, "stdout": "", "stderr": f"command not found: {argv[0]}"}
    except subprocess.TimeoutExpired as exc:
        return {
            "exit_code": 124,
            "stdout": _text(exc.stdout),
            "stderr": _text(exc.stderr) + f"\ntimed out after {timeout_s:g}s",
        }
    return {"exit_code": done.returncode, "stdout": _text(done.stdout), "stderr": _text(done.stderr)}


def _text(data: bytes | str | None, limit: int = 1 << 20) -> str:
    if data is None:
        return ""
    if isinstance(data, bytes):
        data = data.decode("utf-8", errors="replace")
    return data[-limit:]
