"""A handle on a submitted job."""

from __future__ import annotations

import base64
import re
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from iris.client.log_pages import log_pages, read_log_page, task_path
from iris.rpc.enums import TERMINAL_JOB_STATES, JobState, TaskState
from iris.rpc.errors import IrisError
from iris.rpc.log_models import JobLogsResponse, JobSummary, StoredLine
from iris.rpc.models import (
    DEFAULT_TASK_PAGE,
    MAX_TASK_PAGE,
    ExecRequest,
    ExecResponse,
    JobDetail,
    LogLine,
    LogsResponse,
    TaskResult,
    TaskResults,
    TaskStatus,
)

if TYPE_CHECKING:
    from iris.client.client import IrisClient


class JobTimeout(IrisError):
    status_code = 408
    code = "timeout"


class JobFailed(Exception):
    """The job ended without succeeding: which task, why (its failure kind) and, for a callable
    that raised, the remote traceback (its last line is in the message)."""

    def __init__(
        self,
        job_id: str,
        state: JobState,
        *,
        task_index: int | None = None,
        kind: str | None = None,
        summary: str | None = None,
        exit_code: int | None = None,
        remote_traceback: str | None = None,
        hint: str | None = None,
    ) -> None:
        self.job_id = job_id
        self.state = state
        self.task_index = task_index
        self.kind = kind
        self.summary = summary
        self.exit_code = exit_code
        self.remote_traceback = remote_traceback
        self.hint = hint
        where = f"task {task_index}" if task_index is not None else "the job"
        why = _last_line(remote_traceback) or summary or state.value.lower()
        message = f"job {job_id} {state.value}: {where}" + (f" ({kind})" if kind else "") + f": {why}"
        if hint:
            message += f"\n  hint: {hint}"
        super().__init__(message)


def _last_line(text: str | None) -> str | None:
    lines = [line for line in (text or "").splitlines() if line.strip()]
    return lines[-1].strip() if lines else None


__all__ = ["Job", "JobFailed", "JobTimeout", "select_lines", "task_path"]


# The longest the controller holds one wait request (its limit is 60 s), and how much longer the
# client gives the answer to arrive.
WAIT_CHUNK_S = 30.0
WAIT_SLACK_S = 10.0

# Where reading stopped in each task attempt's log: (task index, attempt uid) -> next offset.
LogOffsets = dict[tuple[int, str], int]


def select_lines(
    lines: Iterable[LogLine], *, since: float | None = None, tail: int | None = None
) -> list[LogLine]:
    """Lines at or after ``since``, then the last ``tail`` of each task, interleaved by timestamp."""
    kept = [line for line in lines if since is None or line.ts >= since]
    if tail is not None:
        by_task: dict[int | None, list[LogLine]] = {}
        for line in kept:
            by_task.setdefault(line.task_index, []).append(line)
        kept = [line for group in by_task.values() for line in group[len(group) - tail :]] if tail else []
    return sorted(kept, key=lambda line: line.ts)  # stable: each task's own order is kept


class Job:
    def __init__(self, client: IrisClient, job_id: str) -> None:
        self.client = client
        self.job_id = job_id
        self._results: list[Any] | None = None

    def __repr__(self) -> str:
        return f"Job({self.job_id!r})"

    def detail(self, *, task_offset: int = 0, task_limit: int = DEFAULT_TASK_PAGE) -> JobDetail:
        """The job with one page of its tasks (the first ``DEFAULT_TASK_PAGE`` by default)."""
        return self.client.http.get(
            f"/api/v1/jobs/{task_path(self.job_id)}",
            JobDetail,
            task_offset=task_offset,
            task_limit=task_limit,
        )

    def full_detail(self) -> JobDetail:
        """The job with every one of its tasks, read page by page."""
        detail = self.detail(task_limit=MAX_TASK_PAGE)
        total = sum(detail.task_counts.values())
        while len(detail.tasks) < total:
            page = self.detail(task_offset=len(detail.tasks), task_limit=MAX_TASK_PAGE)
            if not page.tasks:
                break  # the job was replaced while we read it
            detail.tasks.extend(page.tasks)
        return detail

    def status(self) -> JobState:
        return self.detail(task_limit=0).state

    def tasks(self) -> list[TaskStatus]:
        return self.full_detail().tasks

    def wait(
        self, timeout: float | None = None, *, poll_s: float = 0.05, raise_on_failure: bool = False
    ) -> JobDetail:
        """Block until the job is terminal; raises JobTimeout after ``timeout`` seconds, and with
        ``raise_on_failure`` ``JobFailed`` when it ended without succeeding.

        Each request is held by the controller until the job ends (up to ``WAIT_CHUNK_S``), so
        waiting costs a request every half minute, not one per poll. A controller that answers
        at once (one without job waits) is polled instead, ``poll_s`` apart at first."""
        deadline = None if timeout is None else time.monotonic() + timeout
        delay = 0.01
        while True:
            chunk = (
                WAIT_CHUNK_S if deadline is None else max(0.0, min(WAIT_CHUNK_S, deadline - time.monotonic()))
            )
            asked = time.monotonic()
            detail = self._detail_when_done(chunk)
            if detail.state in TERMINAL_JOB_STATES:
                detail = self.detail()
                if raise_on_failure and detail.state is not JobState.SUCCEEDED:
                    raise self._failure(detail)
                return detail
            if deadline is not None and time.monotonic() >= deadline:
                raise JobTimeout(
                    f"job {self.job_id} is still {detail.state.value.lower()} after {timeout:g}s"
                )
            if time.monotonic() - asked < chunk / 2:  # not held: poll, backing off
                time.sleep(delay)
                delay = min(poll_s * 4, delay * 1.5)

    def result(self, timeout: float | None = None) -> list[Any]:
        """What the job's callable returned, one value per task in task order, once it has ended.

        Raises ``JobFailed`` (failure kind, task, remote traceback) when it did not succeed, and
        ``JobTimeout`` after ``timeout`` seconds. Each task's value is kept by the controller up
        to ``MAX_RESULT_BYTES`` (1 MiB) pickled (in a job of over 256 tasks, its share of 256 MiB); read once, then remembered by this handle.
        """
        if self._results is not None:
            return self._results
        detail = self.wait(timeout, raise_on_failure=True)
        if detail.spec.entrypoint.kind != "callable":
            raise IrisError(f"job {self.job_id} runs a command; only a Python callable returns a result")
        import cloudpickle

        by_index = {r.task_index: r for r in self._task_results()}
        values = []
        for index in range(detail.replicas):
            found = by_index.get(index)
            if found is None or not found.ok:
                raise IrisError(
                    f"task {index} of job {self.job_id} succeeded but its result never reached the "
                    "controller (its log says why)"
                )
            values.append(cloudpickle.loads(base64.b64decode(found.payload_b64 or "")))
        self._results = values
        return values

    def _task_results(self) -> list[TaskResult]:
        return self.client.http.get(f"/api/v1/jobs/{task_path(self.job_id)}:results", TaskResults).results

    def _failure(self, detail: JobDetail) -> JobFailed:
        """The ``JobFailed`` of an ended job: its first failed task, with the traceback it posted."""
        failed = next((t for t in detail.tasks if t.failure is not None), None)
        if failed is None:
            failed = next((t for t in detail.tasks if t.state is not TaskState.SUCCEEDED), None)
        remote_tb = None
        if detail.spec.entrypoint.kind == "callable" and failed is not None:
            posted = {r.task_index: r for r in self._task_results()}.get(failed.task_index)
            remote_tb = posted.traceback if posted is not None and not posted.ok else None
        failure = failed.failure if failed is not None else None
        return JobFailed(
            self.job_id,
            detail.state,
            task_index=failed.task_index if failed is not None else None,
            kind=failure.kind if failure is not None else None,
            summary=(failure.summary if failure is not None else None) or detail.error,
            exit_code=detail.exit_code,
            remote_traceback=remote_tb,
            hint=missing_module_hint(remote_tb or "\n".join(failure.log_tail if failure else [])),
        )

    def _detail_when_done(self, wait_s: float) -> JobDetail:
        """The job without its tasks, once it has ended or ``wait_s`` has passed."""
        data = self.client.http.request(
            "GET",
            f"/api/v1/jobs/{task_path(self.job_id)}",
            params={"task_limit": 0, "wait_s": round(wait_s, 3)},
            timeout=wait_s + WAIT_SLACK_S,
        )
        return JobDetail.model_validate(data)

    def kill(self) -> JobState:
        data = self.client.http.post(f"/api/v1/jobs/{task_path(self.job_id)}:stop")
        return JobState(data["state"])

    def task_logs(
        self, task_index: int = 0, *, offset: int = 0, limit: int = 1000, attempt: str | None = None
    ) -> LogsResponse:
        params = {"offset": offset, "limit": limit}
        if attempt:
            params["attempt"] = attempt  # type: ignore[assignment]
        return self.client.http.get(
            f"/api/v1/tasks/{task_path(self.job_id)}/{task_index}:logs", LogsResponse, **params
        )

    def query_logs(
        self,
        *,
        tail: int | None = None,
        since: float | None = None,
        until: float | None = None,
        grep: str | None = None,
        ignore_case: bool = False,
        tasks: Sequence[int] | None = None,
        attempt: int | str | None = None,
        include_children: bool = False,
        include_system: bool = False,
        after: str | None = None,
        wait_s: float | None = None,
        limit: int | None = None,
    ) -> JobLogsResponse:
        """One read of the job's logs from the controller's store (the worker may be long gone).

        ``tail`` is per task; ``grep`` a regular expression; ``after`` the previous answer's
        ``cursor`` (only newer lines, waiting up to ``wait_s`` for one).
        """
        return JobLogsResponse.model_validate(
            read_log_page(
                self.client.http,
                self.job_id,
                tail=tail,
                since=since,
                until=until,
                grep=grep,
                ignore_case=ignore_case,
                tasks=tasks,
                attempt=attempt,
                include_children=include_children,
                include_system=include_system,
                after=after,
                wait_s=wait_s,
                limit=limit,
            )
        )

    def iter_logs(
        self, *, follow: bool = False, tail: int | None = None, **filters: Any
    ) -> Iterator[StoredLine]:
        """Every selected line (or the last ``tail`` per task), then with ``follow`` new ones until
        the job has ended and its logs are complete. Lines of several tasks interleave by time."""
        for page in log_pages(self.client.http, self.job_id, follow=follow, tail=tail, **filters):
            yield from JobLogsResponse.model_validate(page).lines

    def summary(self) -> JobSummary:
        """Per task: state, exit code, attempts, duration, CPU time, peak memory against the limit."""
        return self.client.http.get(f"/api/v1/jobs/{task_path(self.job_id)}:summary", JobSummary)

    def log_lines(self) -> list[LogLine]:
        """Every output line of every task's current attempt, interleaved by time."""
        return self.read_logs()[0]

    def read_logs(self, *, include_system: bool = True) -> tuple[list[LogLine], LogOffsets]:
        """Every line so far of every task's current attempt, and where each log ends.

        Pass the offsets to ``follow_lines(start=...)`` to continue with only the lines after these.
        """
        out: list[LogLine] = []
        offsets: LogOffsets = {}
        page = self.query_logs(after="", include_system=include_system)
        while True:
            out.extend(_log_line(line) for line in page.lines)
            for line in page.lines:
                offsets[(line.task_index, line.attempt_uid)] = line.offset + 1
            if not page.lines:
                break
            page = self.query_logs(after=page.cursor, include_system=include_system)
        return out, offsets

    def logs(self, follow: bool = False) -> list[str] | Iterator[str]:
        """Output lines (stdout and stderr). ``follow=True`` yields lines until the job ends."""
        if follow:
            return (line.line for line in self.follow_lines())
        return [line.line for line in self.log_lines() if line.stream != "system"]

    def follow_lines(
        self,
        *,
        include_system: bool = False,
        poll_s: float = 0.1,
        on_detail: Callable[[JobDetail], None] | None = None,
        start: Mapping[tuple[int, str], int] | None = None,
    ) -> Iterator[LogLine]:
        """Yield output lines of every task as they appear, until the job is terminal and drained.

        Lines interleave across tasks by timestamp. ``on_detail`` sees the job's detail at every
        poll (for a progress display); ``start`` skips what ``read_logs`` already returned.
        """
        cursor = ",".join(f"{uid}:{n}" for (_, uid), n in (start or {}).items())
        while True:
            if on_detail is not None:
                on_detail(self.full_detail())
            try:
                page = self.query_logs(after=cursor, include_system=include_system, wait_s=max(poll_s, 0.5))
            except IrisError:
                time.sleep(poll_s)
                continue
            yield from (_log_line(line) for line in page.lines)
            cursor = page.cursor
            if page.complete and not page.lines:
                if on_detail is not None:
                    on_detail(self.full_detail())
                return

    def follow_all_attempts(
        self, *, poll_s: float = 0.1, on_detail: Callable[[JobDetail], None] | None = None
    ) -> Iterator[StoredLine]:
        """Every line of every attempt of every task (system lines included) as they appear,
        until the job is terminal and drained: a retried task's earlier attempts are not skipped.
        A replaced run's attempts never appear."""
        cursor = ""
        while True:
            if on_detail is not None:
                on_detail(self.full_detail())
            try:
                page = self.query_logs(
                    after=cursor, attempt="all", include_system=True, wait_s=max(poll_s, 0.5)
                )
            except IrisError:
                time.sleep(poll_s)
                continue
            yield from page.lines
            cursor = page.cursor
            if page.complete and not page.lines:
                if on_detail is not None:
                    on_detail(self.full_detail())
                return

    def exec(self, argv: Sequence[str], *, task_index: int = 0, timeout: float = 60.0) -> ExecResponse:
        """Run a command beside a running task (its working directory and environment, or its pod)."""
        body = ExecRequest(argv=list(argv), timeout_s=timeout)
        return self.client.http.post(
            f"/api/v1/tasks/{task_path(self.job_id)}/{task_index}:exec", ExecResponse, body
        )

    def process_status(self, task_index: int = 0) -> dict[str, Any]:
        """The task's processes (worker backend) or its pod's status (kubernetes backend)."""
        return self.client.http.request("GET", f"/api/v1/tasks/{task_path(self.job_id)}/{task_index}:status")

    def exit_code(self) -> int:
        detail = self.detail()
        if detail.exit_code is not None:
            return detail.exit_code
        if detail.state is JobState.SUCCEEDED:
            return 0
        if detail.state is JobState.KILLED:
            return 130
        if detail.task_counts.get(TaskState.FAILED.value):
            return 1
        return 1


_NO_MODULE = re.compile(r"ModuleNotFoundError: No module named '([^'.]+)")


def missing_module_hint(text: str, directory: Path | None = None) -> str | None:
    """A hint when a task could not import a module that is in the submitter's directory."""
    names = _NO_MODULE.findall(text)
    if not names:
        return None
    name = names[-1]
    here = directory or Path.cwd()
    for candidate in (here / f"{name}.py", here / name):
        if candidate.exists():
            return (
                f"{candidate} is on this machine but not in the task's workspace: submit with "
                f"workspace=True (the directory you run from; the CLI's default) or workspace=PATH, "
                f"and check it is not left out by .gitignore or .irisignore"
            )
    return None


def _log_line(line: StoredLine) -> LogLine:
    return LogLine.model_construct(ts=line.ts, stream=line.stream, line=line.line, task_index=line.task_index)
