"""Job state is derived from its tasks' states: a pure roll-up, first matching rule wins."""

from __future__ import annotations

from collections.abc import Mapping

from iris.rpc.enums import ACTIVE_TASK_STATES, EXECUTING_TASK_STATES, TERMINAL_JOB_STATES, JobState, TaskState

_INFRA_LOSS = (TaskState.WORKER_FAILED, TaskState.PREEMPTED, TaskState.COSCHED_FAILED)


def rollup_job_state(
    current: JobState,
    counts: Mapping[TaskState, int],
    *,
    max_task_failures: int,
    ever_started: bool,
) -> JobState:
    """The job state for a histogram of task states.

    The job fails once more than ``max_task_failures`` tasks have failed for good (0 by default:
    the first task that exhausts its retries). Preemptions never count.
    """
    if current in TERMINAL_JOB_STATES:
        return current
    total = sum(counts.values())
    if total and counts.get(TaskState.SUCCEEDED, 0) == total:
        return JobState.SUCCEEDED
    if counts.get(TaskState.FAILED, 0) > max_task_failures:
        return JobState.FAILED
    if counts.get(TaskState.UNSCHEDULABLE, 0):
        return JobState.UNSCHEDULABLE
    if counts.get(TaskState.KILLED, 0):
        return JobState.KILLED
    terminal = total - sum(counts.get(s, 0) for s in (TaskState.PENDING, *ACTIVE_TASK_STATES))
    if total and terminal == total:
        if any(counts.get(s, 0) for s in _INFRA_LOSS):
            return JobState.WORKER_FAILED
        if counts.get(TaskState.FAILED, 0):
            return JobState.FAILED
        return JobState.SUCCEEDED
    # ASSIGNED alone is not running yet: on Kubernetes it means "pod created, waiting for Kueue".
    if ever_started or any(counts.get(s, 0) for s in EXECUTING_TASK_STATES):
        return JobState.RUNNING
    return JobState.PENDING
