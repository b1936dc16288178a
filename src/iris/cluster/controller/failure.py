"""Why a task failed, in one sentence (pure): the kind, the numbers behind it, a Python exception.

Reads what the controller already knows (task and attempt state, exit code, error text), the
attempt's usage and the tail of its log; decides nothing, changes nothing.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import TypedDict

from iris.rpc.enums import TaskState
from iris.rpc.log_models import AttemptUsage
from iris.rpc.models import ENVIRONMENT_ERROR_PREFIX, AttemptStatus, FailureInfo, TaskStatus
from iris.rpc.units import format_bytes, parse_bytes

FAILED_STATES = frozenset(
    {
        TaskState.FAILED,
        TaskState.WORKER_FAILED,
        TaskState.PREEMPTED,
        TaskState.UNSCHEDULABLE,
        TaskState.COSCHED_FAILED,
    }
)
TAIL_LINES = 20
# Runtimes start the error of an attempt whose image could not be had with this (kind "image").
IMAGE_ERROR_PREFIX = "image "

_OOM_USED = re.compile(r"used ([0-9.]+\s*[A-Za-z]*), limit ([0-9.]+\s*[A-Za-z]*)")
_EXCEPTION = re.compile(
    r"^([A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt|Warning|Fault|[A-Z]\w*)):?(?: (.*))?$"
)
_NOT_FOUND = re.compile(r"No such file or directory|command not found|not found in PATH", re.IGNORECASE)


def python_exception(lines: Sequence[str]) -> str | None:
    """``Type: message`` of the last Python traceback in ``lines``, if any."""
    start = None
    for i in range(len(lines) - 1, -1, -1):
        if lines[i].startswith("Traceback (most recent call last):"):
            start = i
            break
    if start is None:
        return None
    for line in lines[start + 1 :]:
        if not line or line[0].isspace():
            continue
        match = _EXCEPTION.match(line.rstrip())
        if match:
            return line.rstrip()
    return None


def _bytes(text: str) -> int | None:
    try:
        return parse_bytes(text.replace(" ", ""))
    except ValueError:
        return None


class _Common(TypedDict):
    """The FailureInfo fields every kind of failure fills the same way."""

    exit_code: int | None
    attempt_uid: str | None
    attempt_number: int | None
    exception: str | None
    peak_rss_bytes: int | None
    memory_limit_bytes: int | None
    log_tail: list[str]


def _attempt(task: TaskStatus) -> AttemptStatus | None:
    for attempt in reversed(task.attempts):
        if attempt.attempt_uid == task.current_attempt_uid:
            return attempt
    return task.attempts[-1] if task.attempts else None


def diagnose(
    task: TaskStatus,
    *,
    memory_limit_bytes: int,
    usage: AttemptUsage | None = None,
    log_tail: Sequence[str] = (),
    preempted_by: str | None = None,
    timeout_s: float | None = None,
) -> FailureInfo | None:
    """The failure of a task that ended badly (None for one that did not)."""
    if task.state not in FAILED_STATES:
        return None
    attempt = _attempt(task)
    error = (attempt.error if attempt and attempt.error else None) or task.error or ""
    exit_code = task.exit_code if task.exit_code is not None else (attempt.exit_code if attempt else None)
    peak = usage.peak_rss_bytes if usage and usage.peak_rss_bytes else None
    exception = python_exception(log_tail)
    common: _Common = {
        "exit_code": exit_code,
        "attempt_uid": attempt.attempt_uid if attempt else None,
        "attempt_number": attempt.attempt_number if attempt else None,
        "exception": exception,
        "peak_rss_bytes": peak,
        "memory_limit_bytes": memory_limit_bytes or None,
        "log_tail": list(log_tail[-TAIL_LINES:]),
    }
    lowered = error.lower()
    if error.startswith(IMAGE_ERROR_PREFIX):
        return FailureInfo(kind="image", summary=error, **common)
    if error.startswith(ENVIRONMENT_ERROR_PREFIX):  # pip packages or uv sync could not be installed
        return FailureInfo(kind="environment", summary=error, **common)
    if task.state is TaskState.UNSCHEDULABLE:
        return FailureInfo(
            kind="unschedulable", summary=error or "it could not be scheduled in time", **common
        )
    if task.state is TaskState.COSCHED_FAILED:
        return FailureInfo(kind="gang_failed", summary=error or "a member of its gang failed", **common)
    if task.state is TaskState.PREEMPTED or "preempted" in lowered:
        who = f"preempted by {preempted_by}" if preempted_by else (error or "preempted")
        return FailureInfo(kind="preempted", summary=who, **common)
    if task.state is TaskState.WORKER_FAILED or "was lost" in lowered:
        return FailureInfo(kind="worker_lost", summary=error or "its worker was lost", **common)
    if lowered.startswith("out of disk"):  # the worker's DISK kills (runtime/disk.py)
        return FailureInfo(kind="disk", summary=error, **common)
    if "out of memory" in lowered or "oomkilled" in lowered:
        match = _OOM_USED.search(error)
        if match:
            used = _bytes(match.group(1))
            if used is not None and (peak is None or used > peak):
                peak = used
        common["peak_rss_bytes"] = peak
        limit = memory_limit_bytes
        summary = "OOM-killed"
        if peak and limit:
            summary += f" at peak {format_bytes(peak)} of limit {format_bytes(limit)}"
        elif limit:
            summary += f" (limit {format_bytes(limit)})"
        return FailureInfo(kind="oom", summary=summary, **common)
    if "timed out" in lowered or "timeout" in lowered:
        summary = (
            f"execution timeout: stopped at its {timeout_s:g}s limit"
            if timeout_s
            else f"execution timeout: {error}"
        )
        return FailureInfo(kind="timeout", summary=summary, **common)
    if exit_code == 127 or (exit_code is None and _NOT_FOUND.search(error)) or _is_not_found(error):
        return FailureInfo(kind="command_not_found", summary=f"command not found: {error}", **common)
    if exit_code is None and error.startswith("could not"):
        return FailureInfo(kind="start_failed", summary=error, **common)
    summary = f"exited with code {exit_code}" if exit_code is not None else (error or "failed")
    if error.startswith("killed by "):
        summary = f"{error} (exit code {exit_code})"
    if exception:
        summary += f": {exception}"
    return FailureInfo(kind="exit_code", summary=summary, **common)


def _is_not_found(error: str) -> bool:
    return error.startswith("could not start the process") and bool(_NOT_FOUND.search(error))
