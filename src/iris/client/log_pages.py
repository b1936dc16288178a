"""A job's logs from the controller's store, page by page, as the JSON the API answers.

``Job.iter_logs`` validates each page into models; ``iris job logs`` prints the pages as they
come. Nothing here imports pydantic (~0.25 s), so the command starts in a fraction of that.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from iris.rpc.http import HttpClient


def task_path(task_id: str) -> str:
    """A job or task id as it appears in an API path."""
    return task_id.lstrip("/")


def log_params(
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
) -> dict[str, Any]:
    """The query of one read of a job's logs (``GET /api/v1/jobs/{id}:logs``); see ``Job.query_logs``."""
    return {
        "tail": tail,
        "since": since,
        "until": until,
        "grep": grep,
        "ignore_case": ignore_case or None,
        "task": list(tasks) if tasks else None,
        "attempt": attempt,
        "include_children": include_children or None,
        "include_system": include_system or None,
        "after": after,
        "wait_s": wait_s,
        "limit": limit,
    }


def read_log_page(http: HttpClient, job_id: str, **query: Any) -> dict[str, Any]:
    answer: dict[str, Any] = http.request(
        "GET", f"/api/v1/jobs/{task_path(job_id)}:logs", params=log_params(**query)
    )
    return answer


def log_pages(
    http: HttpClient, job_id: str, *, follow: bool = False, tail: int | None = None, **filters: Any
) -> Iterator[dict[str, Any]]:
    """Pages of every selected line (or the last ``tail`` per task), then with ``follow`` of new
    ones until the job has ended and its logs are complete."""
    if tail is not None:
        page = read_log_page(http, job_id, tail=tail, **filters)
    else:
        page = read_log_page(http, job_id, after="", **filters)
    while True:
        yield page
        if page.get("complete") and not page["lines"]:
            return
        if not page["lines"] and not follow:
            return
        page = read_log_page(http, job_id, after=page["cursor"], wait_s=1.0 if follow else None, **filters)
