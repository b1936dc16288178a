"""The text of `iris job run`'s live status and its dashboard link."""

from __future__ import annotations

import pytest

from iris.cli.progress import dashboard_link, pending_reason, status_lines, task_counts_text
from iris.rpc.enums import JobState, PriorityBand, TaskState
from iris.rpc.models import Entrypoint, JobDetail, JobSpec, TaskStatus


def _detail(state: JobState, *tasks: tuple[TaskState, str | None], submitted_at: float = 100.0) -> JobDetail:
    return JobDetail(
        job_id="/u/j",
        name="j",
        user="u",
        state=state,
        priority=PriorityBand.INTERACTIVE,
        replicas=len(tasks),
        submitted_at=submitted_at,
        spec=JobSpec(name="j", entrypoint=Entrypoint.from_command("true")),
        tasks=[
            TaskStatus(task_id=f"/u/j/{i}", job_id="/u/j", task_index=i, state=s, pending_reason=r)
            for i, (s, r) in enumerate(tasks)
        ],
    )


def test_dashboard_link_matches_the_dashboard_router() -> None:
    assert dashboard_link("http://h:10000/", "/alice/train") == "http://h:10000/#/jobs/alice/train"


@pytest.mark.parametrize(
    ("states", "text"),
    [
        ([], ""),
        ([TaskState.RUNNING, TaskState.PENDING, TaskState.RUNNING], "1 pending, 2 running"),
        ([TaskState.SUCCEEDED, TaskState.FAILED, TaskState.BUILDING], "1 building, 1 succeeded, 1 failed"),
    ],
)
def test_task_counts_in_life_cycle_order(states: list[TaskState], text: str) -> None:
    assert task_counts_text(_detail(JobState.RUNNING, *((s, None) for s in states)).tasks) == text


def test_status_shows_the_first_pending_reason() -> None:
    detail = _detail(
        JobState.PENDING,
        (TaskState.PENDING, "needs 64 cpu; the largest worker has 8"),
        (TaskState.PENDING, "other"),
        submitted_at=100.0,
    )
    assert status_lines(detail, now=175.0) == [
        "pending  ·  2 pending  ·  1m15s",
        "pending: needs 64 cpu; the largest worker has 8",
    ]


def test_no_reason_line_once_nothing_waits() -> None:
    detail = _detail(JobState.RUNNING, (TaskState.RUNNING, None), (TaskState.SUCCEEDED, None))
    assert pending_reason(detail) is None
    assert status_lines(detail, now=103.4) == ["running  ·  1 running, 1 succeeded  ·  3s"]
