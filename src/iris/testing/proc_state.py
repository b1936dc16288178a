"""Whether a process still runs, read from ``/proc`` (a zombie counts as gone)."""

from __future__ import annotations


def running(pid: int) -> bool:
    """False once ``pid`` has exited, including the window where ``/proc/PID`` vanishes mid-read."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False
