"""Pure decisions of the subprocess runtime: which limits are breached, and how an attempt ended."""

from __future__ import annotations

import signal
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum

from iris.rpc.enums import TaskState
from iris.rpc.models import TIMEOUT_EXIT_CODE
from iris.rpc.units import format_bytes


class KillReason(StrEnum):
    STOP = "stop"  # the controller sent a stop intent
    ZOMBIE = "zombie"  # the attempt is not in the controller's desired set any more
    SHUTDOWN = "shutdown"  # the worker itself is stopping
    TIMEOUT = "timeout"  # the attempt ran past its execution timeout
    OOM = "oom"  # the process tree used more memory than the attempt's limit
    FENCED = "fenced"  # the controller has not reconciled this worker for the fencing grace
    DISK = "disk"  # the attempt used more disk than it asked for, or filled the worker's disk


@dataclass(frozen=True, slots=True)
class LimitView:
    attempt_uid: str
    memory_limit_bytes: int
    # time.monotonic() after which the attempt has timed out, or None.
    deadline: float | None
    timeout_s: float | None


@dataclass(frozen=True, slots=True)
class Enforcement:
    attempt_uid: str
    reason: KillReason
    message: str


def decide_enforcements(
    attempts: Iterable[LimitView], rss_by_uid: Mapping[str, int], now: float
) -> list[Enforcement]:
    """Attempts to kill now. Memory wins over timeout: it is the more specific explanation."""
    out = []
    for view in attempts:
        used = rss_by_uid.get(view.attempt_uid, 0)
        if view.memory_limit_bytes > 0 and used > view.memory_limit_bytes:
            message = (
                f"out of memory: used {format_bytes(used)}, limit {format_bytes(view.memory_limit_bytes)}"
            )
            out.append(Enforcement(view.attempt_uid, KillReason.OOM, message))
        elif view.deadline is not None and now >= view.deadline:
            out.append(
                Enforcement(view.attempt_uid, KillReason.TIMEOUT, f"timed out after {view.timeout_s:g}s")
            )
    return out


def exit_code_of(returncode: int) -> int:
    """Shell convention: death by signal N reads as exit code 128+N."""
    return 128 - returncode if returncode < 0 else returncode


@dataclass(frozen=True, slots=True)
class Outcome:
    state: TaskState
    exit_code: int | None
    error: str | None


OOM_EXIT_CODE = 137


def final_outcome(returncode: int, kill_reason: KillReason | None, kill_message: str | None) -> Outcome:
    """How an attempt ended, from its main process's return code and why (if) the worker killed it."""
    code = exit_code_of(returncode)
    if kill_reason is KillReason.OOM:
        return Outcome(TaskState.FAILED, OOM_EXIT_CODE, kill_message)
    if kill_reason is KillReason.TIMEOUT:
        return Outcome(TaskState.FAILED, TIMEOUT_EXIT_CODE, kill_message)
    if kill_reason is KillReason.DISK:
        return Outcome(TaskState.FAILED, code, kill_message)
    if kill_reason is not None:
        return Outcome(TaskState.KILLED, code, kill_message)
    if returncode == 0:
        return Outcome(TaskState.SUCCEEDED, 0, None)
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        return Outcome(TaskState.FAILED, code, f"killed by {name}")
    return Outcome(TaskState.FAILED, code, f"exited with code {returncode}")
