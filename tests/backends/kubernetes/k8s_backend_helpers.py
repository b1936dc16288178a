"""Desired-attempt builders and a polling helper for the Kubernetes backend tests."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, TypeVar

from iris.rpc.models import DesiredAttempt, Entrypoint, ResourceSpec, RunSpec

T = TypeVar("T")


def wait_for(condition: Callable[[], T], *, timeout: float = 20.0, what: str = "condition") -> T:
    deadline = time.monotonic() + timeout
    last: T | None = None
    while time.monotonic() < deadline:
        last = condition()
        if last:
            return last
        time.sleep(0.02)
    raise AssertionError(f"timed out after {timeout}s waiting for {what} (last: {last!r})")


def run_spec(
    uid: str, *, task: str = "/alice/train/0", argv: tuple[str, ...] = ("true",), **extra: Any
) -> RunSpec:
    job = task.rsplit("/", 1)[0]
    return RunSpec(
        attempt_uid=uid,
        attempt_number=0,
        job_id=job,
        task_id=task,
        task_index=int(task.rsplit("/", 1)[1]),
        entrypoint=Entrypoint.from_command(*argv),
        resources=ResourceSpec(cpu=0.1, memory="64MB"),
        **extra,
    )


def run(uid: str, spec: RunSpec | None = None) -> DesiredAttempt:
    return DesiredAttempt(attempt_uid=uid, intent="run", spec=spec)


def stop(uid: str) -> DesiredAttempt:
    return DesiredAttempt(attempt_uid=uid, intent="stop", stop_reason="CANCELLED")
