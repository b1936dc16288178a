"""diagnose(): each way a task can fail gets its own kind and sentence (pure)."""

from __future__ import annotations

import pytest

from iris.cluster.controller.failure import diagnose, python_exception
from iris.rpc.enums import TaskState
from iris.rpc.log_models import AttemptUsage
from iris.rpc.models import AttemptStatus, TaskStatus

MB = 1000**2


def task(state: TaskState, *, exit_code: int | None = None, error: str | None = None) -> TaskStatus:
    attempt = AttemptStatus(
        attempt_number=0, attempt_uid="u0", state=state, created_at=0.0, exit_code=exit_code, error=error
    )
    return TaskStatus(
        task_id="/u/j/0",
        job_id="/u/j",
        task_index=0,
        state=state,
        current_attempt_uid="u0",
        exit_code=exit_code,
        error=error,
        attempts=[attempt],
    )


@pytest.mark.parametrize(
    ("t", "kind", "summary"),
    [
        (task(TaskState.FAILED, exit_code=1, error="exited with code 1"), "exit_code", "exited with code 1"),
        (
            task(TaskState.FAILED, exit_code=137, error="out of memory: used 300MB, limit 128MB"),
            "oom",
            "OOM-killed at peak 300MB of limit 128MB",
        ),
        (
            task(TaskState.FAILED, exit_code=143, error="timed out after 2s"),
            "timeout",
            "execution timeout: timed out after 2s",
        ),
        (
            task(TaskState.WORKER_FAILED, error="worker w1 was lost: stopped answering reconciles"),
            "worker_lost",
            "worker w1 was lost: stopped answering reconciles",
        ),
        (
            task(
                TaskState.FAILED,
                exit_code=127,
                error="could not start the process: [Errno 2] No such file or directory: 'nope'",
            ),
            "command_not_found",
            "command not found: could not start the process: [Errno 2] No such file or directory: 'nope'",
        ),
        (
            task(
                TaskState.FAILED,
                exit_code=143,
                error="out of disk: used 3MB of disk, over its request of 1MB",
            ),
            "disk",
            "out of disk: used 3MB of disk, over its request of 1MB",
        ),
        (
            task(TaskState.FAILED, exit_code=137, error="killed by SIGKILL"),
            "exit_code",
            "killed by SIGKILL (exit code 137)",
        ),
    ],
)
def test_each_failure_has_its_kind(t: TaskStatus, kind: str, summary: str) -> None:
    info = diagnose(t, memory_limit_bytes=128 * MB)
    assert info is not None
    assert (info.kind, info.summary) == (kind, summary)


def test_a_timeout_names_its_limit() -> None:
    info = diagnose(task(TaskState.FAILED, error="timed out"), memory_limit_bytes=0, timeout_s=90)
    assert info is not None and info.summary == "execution timeout: stopped at its 90s limit"


def test_preempted_names_the_preemptor() -> None:
    info = diagnose(task(TaskState.PREEMPTED), memory_limit_bytes=0, preempted_by="/alice/urgent/0")
    assert info is not None and info.kind == "preempted" and info.summary == "preempted by /alice/urgent/0"


def test_oom_uses_the_sampled_peak_when_it_is_higher() -> None:
    t = task(TaskState.FAILED, exit_code=137, error="out of memory (OOMKilled)")
    info = diagnose(t, memory_limit_bytes=256 * MB, usage=AttemptUsage(peak_rss_bytes=255 * MB))
    assert info is not None and info.summary == "OOM-killed at peak 255MB of limit 256MB"


def test_succeeded_and_running_tasks_have_no_failure() -> None:
    assert diagnose(task(TaskState.SUCCEEDED, exit_code=0), memory_limit_bytes=0) is None
    assert diagnose(task(TaskState.RUNNING), memory_limit_bytes=0) is None


def test_a_python_traceback_gives_the_exception_not_the_frame() -> None:
    tail = [
        "epoch 3",
        "Traceback (most recent call last):",
        '  File "<dynamic-code>", line 4, in train',
        "    raise ValueError('learning rate too high: 5.0')",
        "ValueError: learning rate too high: 5.0",
    ]
    assert python_exception(tail) == "ValueError: learning rate too high: 5.0"
    info = diagnose(
        task(TaskState.FAILED, exit_code=1, error="exited with code 1"), memory_limit_bytes=0, log_tail=tail
    )
    assert info is not None
    assert info.summary == "exited with code 1: ValueError: learning rate too high: 5.0"
    assert info.log_tail == tail
    assert python_exception(["all fine"]) is None
