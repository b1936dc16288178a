"""Shape database rows into the wire views the API returns."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from typing import Any

from iris.cluster.controller import store
from iris.rpc.enums import TaskState
from iris.rpc.models import DEFAULT_TASK_PAGE, AttemptStatus, JobDetail, JobStatus, ResourceSpec, TaskStatus

# A list page shows the same jobs on every refresh, and a stored spec never changes: its list
# fields are kept by the spec's text (bounded; the oldest entry goes first).
_LIST_FIELDS_KEPT = 4096
_list_fields_kept: dict[str, tuple[str, ResourceSpec]] = {}


def _list_fields(spec_json: str) -> tuple[str, ResourceSpec]:
    """The entrypoint's description and the resources, without validating the whole spec (a list
    page shows hundreds of jobs; their specs were validated when submitted)."""
    kept = _list_fields_kept.get(spec_json)
    if kept is not None:
        return kept
    data: dict[str, Any] = json.loads(spec_json)  # the stored spec's JSON object
    entry: dict[str, Any] = data.get("entrypoint") or {}
    argv: list[str] = entry.get("argv") or []
    text = " ".join(argv) if entry.get("kind") == "command" else "<python callable>"
    fields = text, ResourceSpec.model_validate(data.get("resources") or {})
    if len(_list_fields_kept) >= _LIST_FIELDS_KEPT:
        _list_fields_kept.pop(next(iter(_list_fields_kept)), None)
    _list_fields_kept[spec_json] = fields
    return fields


def job_status(
    row: store.JobRow, counts: dict[str, int] | None = None, pending_reason: str | None = None
) -> JobStatus:
    entrypoint, resources = _list_fields(row.spec_json)
    return JobStatus(
        job_id=row.job_id,
        name=row.name,
        user=row.user,
        parent_job_id=row.parent_job_id,
        state=row.state,
        priority=row.priority,
        replicas=row.replicas,
        task_counts=counts or {},
        submitted_at=row.submitted_at,
        started_at=row.started_at,
        finished_at=row.finished_at,
        exit_code=row.exit_code,
        error=row.error,
        pending_reason=pending_reason,
        entrypoint=entrypoint,
        resources=resources,
    )


def task_statuses(
    cur: sqlite3.Cursor, rows: Sequence[store.TaskRow], *, with_attempts: bool = True
) -> list[TaskStatus]:
    attempts = store.attempts_of_tasks(cur, [r.task_id for r in rows]) if with_attempts else {}
    out: list[TaskStatus] = []
    for r in rows:
        atts = [
            AttemptStatus(
                attempt_number=a.attempt_number,
                attempt_uid=a.attempt_uid,
                state=a.state,
                worker_id=a.worker_id,
                worker_address=a.worker_address,
                created_at=a.created_at,
                started_at=a.started_at,
                finished_at=a.finished_at,
                exit_code=a.exit_code,
                error=a.error,
                message=a.message,
            )
            for a in attempts.get(r.task_id, [])
        ]
        out.append(
            TaskStatus(
                task_id=r.task_id,
                job_id=r.job_id,
                task_index=r.task_index,
                state=r.state,
                attempt_count=len(atts),
                current_attempt_uid=r.current_attempt_uid,
                worker_id=r.worker_id,
                exit_code=r.exit_code,
                error=r.error,
                pending_reason=r.pending_reason
                if r.state in (TaskState.PENDING, TaskState.ASSIGNED)
                else None,
                failure_count=r.failure_count,
                preemption_count=r.preemption_count,
                started_at=r.started_at,
                finished_at=r.finished_at,
                attempts=atts,
            )
        )
    return out


def job_detail(
    cur: sqlite3.Cursor, row: store.JobRow, *, task_offset: int = 0, task_limit: int = DEFAULT_TASK_PAGE
) -> JobDetail:
    """The job with one page of its tasks; counts and the pending reason cover all of them."""
    rows = store.tasks_of_job(cur, row.job_id, offset=task_offset, limit=task_limit)
    tasks = task_statuses(cur, rows)
    counts = store.task_counts_for_jobs(cur, [row.job_id])[row.job_id]
    base = job_status(row, counts)
    pending = next((t.pending_reason for t in tasks if t.pending_reason), None)
    if pending is None and (counts.get("PENDING") or counts.get("ASSIGNED")):
        pending = store.pending_reasons_for_jobs(cur, [row.job_id]).get(row.job_id)
    fields: dict[str, Any] = {**base.model_dump(), "pending_reason": pending}
    return JobDetail(
        **fields,
        spec=row.spec,
        tasks=tasks,
        task_offset=task_offset,
        children=store.children_of(cur, row.job_id),
    )
