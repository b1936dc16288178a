"""The line that announces a retry while a job's output streams (``iris job run``, ``job logs -f``).

``--- task 0: attempt 0 failed (exit 1, will retry: 1 of 2 left); attempt 1 starting on worker-0 ---``

Works on the API's plain JSON (the logs command starts without pydantic): a task as
``GET /api/v1/jobs/{id}`` lists it, and the job's spec for the retry budgets.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

# Task (or attempt) states that spend the failure budget, and those that spend the preemption one.
_FAILURE_STATES = frozenset({"FAILED"})
_PREEMPTION_STATES = frozenset({"PREEMPTED", "WORKER_FAILED"})
_ENDED_AS = {
    "FAILED": "failed",
    "PREEMPTED": "was preempted",
    "WORKER_FAILED": "lost its worker",
    "COSCHED_FAILED": "stopped with its gang",
    "KILLED": "was killed",
}


def retry_line(task: Mapping[str, Any], spec: Mapping[str, Any], before: int, now: int) -> str:
    """What became of attempt ``before`` of ``task`` and where attempt ``now`` starts (pure)."""
    attempts = {int(a["attempt_number"]): a for a in task.get("attempts") or []}
    index = task["task_index"]
    prev = attempts.get(before)
    what = f"attempt {before} ended"
    if prev is not None:
        state = str(prev.get("state", ""))
        upto = [a for n, a in attempts.items() if n <= before]
        details: list[str] = []
        if prev.get("exit_code") is not None:
            details.append(f"exit {prev['exit_code']}")
        budget: tuple[int, int] | None = None
        if state in _FAILURE_STATES:
            used = sum(1 for a in upto if a.get("state") in _FAILURE_STATES)
            budget = (int(spec.get("max_retries_failure", 0)), used)
        elif state in _PREEMPTION_STATES:
            used = sum(1 for a in upto if a.get("state") in _PREEMPTION_STATES)
            budget = (int(spec.get("max_retries_preemption", 0)), used)
        if budget is not None:
            total, used = budget
            details.append(f"will retry: {max(0, total - used)} of {total} left")
        what = f"attempt {before} {_ENDED_AS.get(state, state.lower() or 'ended')}"
        if details:
            what += f" ({', '.join(details)})"
    new = attempts.get(now)
    worker = new.get("worker_id") if new is not None else None
    starting = f"attempt {now} starting" + (f" on {worker}" if worker else "")
    return f"--- task {index}: {what}; {starting} ---"


class RetryAnnouncer:
    """Watches a stream of log lines (any attempt, any task) and returns the retry line when a
    task's next attempt shows its first line. ``fetch_task(index)`` returns the task's JSON."""

    def __init__(
        self, spec: Mapping[str, Any], fetch_task: Callable[[int], Mapping[str, Any] | None]
    ) -> None:
        self.spec = spec
        self.fetch_task = fetch_task
        self._shown: dict[int, int] = {}  # task index -> the attempt number being shown

    def see(self, task_index: int, attempt_number: int) -> str | None:
        shown = self._shown.get(task_index)
        if shown is not None and attempt_number <= shown:
            return None
        self._shown[task_index] = attempt_number
        if shown is None:
            return None  # the first attempt seen of this task: nothing to announce
        task = self.fetch_task(task_index)
        if task is None:
            return f"--- task {task_index}: attempt {attempt_number} starting ---"
        return retry_line(task, self.spec, shown, attempt_number)


def task_fetcher(request: Callable[..., Any], job_path: str) -> Callable[[int], Mapping[str, Any] | None]:
    """``fetch_task`` over the API: one task of the job by index (``request`` is ``HttpClient.request``)."""

    def fetch(index: int) -> Mapping[str, Any] | None:
        detail = request("GET", f"/api/v1/jobs/{job_path}", params={"task_offset": index, "task_limit": 1})
        tasks = detail.get("tasks") or []
        return tasks[0] if tasks and tasks[0].get("task_index") == index else None

    return fetch
