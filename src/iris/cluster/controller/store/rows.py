"""Row types the API reads return and the SQL-row -> dataclass helpers every store module shares."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from iris.cluster.controller.scheduler.model import Resources
from iris.cluster.controller.snapshots import JobRow
from iris.cluster.controller.task_state import AttemptSnapshot
from iris.rpc.enums import JobState, PriorityBand, StopReason, TaskState

# Stored text -> enum member by dict lookup: calling the enum costs ~1 us a value, paid for
# every row a round reads.
TASK_STATE: dict[str, TaskState] = {s.value: s for s in TaskState}
JOB_STATE: dict[str, JobState] = {s.value: s for s in JobState}
BAND: dict[str, PriorityBand] = {b.value: b for b in PriorityBand}
STOP_REASON: dict[str | None, StopReason | None] = {None: None, "": None, **{r.value: r for r in StopReason}}


JOB_COLUMNS = (
    "job_id, name, user, parent_job_id, root_job_id, depth, state, priority, replicas, spec_json, submitted_at,"
    " root_submitted_at, started_at, finished_at, scheduling_deadline, error, exit_code, pending_reason, run_uid"
)


def row_to_job(row: sqlite3.Row) -> JobRow:
    return JobRow(
        job_id=row["job_id"],
        name=row["name"],
        user=row["user"],
        parent_job_id=row["parent_job_id"],
        root_job_id=row["root_job_id"],
        depth=row["depth"],
        state=JOB_STATE[row["state"]],
        priority=BAND[row["priority"]],
        replicas=row["replicas"],
        spec_json=row["spec_json"],
        submitted_at=row["submitted_at"],
        root_submitted_at=row["root_submitted_at"],
        started_at=row["started_at"],
        finished_at=row["finished_at"],
        scheduling_deadline=row["scheduling_deadline"],
        error=row["error"],
        exit_code=row["exit_code"],
        pending_reason=row["pending_reason"],
        run_uid=row["run_uid"],
    )


TASK_COLUMNS = (
    "t.task_id, t.job_id, t.task_index, t.state, t.current_attempt_uid, t.worker_id, t.failure_count,"
    " t.preemption_count, t.exit_code, t.error, t.pending_reason, t.started_at, t.finished_at"
)


@dataclass(frozen=True, slots=True)
class TaskRow:
    task_id: str
    job_id: str
    task_index: int
    state: TaskState
    current_attempt_uid: str | None
    worker_id: str | None
    failure_count: int
    preemption_count: int
    exit_code: int | None
    error: str | None
    pending_reason: str | None
    started_at: float | None
    finished_at: float | None


@dataclass(frozen=True, slots=True)
class AttemptRow:
    attempt_uid: str
    task_id: str
    attempt_number: int
    worker_id: str | None
    worker_address: str | None
    state: TaskState
    created_at: float
    started_at: float | None
    finished_at: float | None
    exit_code: int | None
    error: str | None
    message: str | None


def row_to_task(r: sqlite3.Row) -> TaskRow:
    return TaskRow(*r[:3], TASK_STATE[r[3]], *r[4:])  # pyright: ignore[reportCallIssue] (TASK_COLUMNS)


ATTEMPT_ROW_SQL = (
    "SELECT a.attempt_uid, a.task_id, a.attempt_number, a.worker_id, w.address, a.state, a.created_at,"
    " a.started_at, a.finished_at, a.exit_code, a.error, a.message"
    " FROM attempts a LEFT JOIN workers w ON w.worker_id = a.worker_id"
)


def row_to_attempt(r: sqlite3.Row) -> AttemptRow:
    return AttemptRow(*r[:5], TASK_STATE[r[5]], *r[6:])  # pyright: ignore[reportCallIssue] (ATTEMPT_ROW_SQL)


def retry_budgets_of(spec_json: str) -> tuple[int, int]:
    spec = json.loads(spec_json)
    return spec.get("max_retries_failure", 0), spec.get("max_retries_preemption", 100)


ATTEMPT_SNAPSHOT_COLUMNS = "attempt_uid, task_id, state, released, stop_reason, started_at, finished_at, exit_code, error, worker_id, version"


def row_to_attempt_snapshot(r: sqlite3.Row) -> AttemptSnapshot:
    return AttemptSnapshot(
        attempt_uid=r[0],
        task_id=r[1],
        state=TASK_STATE[r[2]],
        released=bool(r[3]),
        stop_reason=STOP_REASON[r[4]],
        started_at=r[5],
        finished_at=r[6],
        exit_code=r[7],
        error=r[8],
        worker_id=r[9],
        version=r[10],
    )


@dataclass(frozen=True, slots=True)
class WaitingTask:
    task_id: str
    job_id: str
    pending_reason: str | None
    user: str
    priority: PriorityBand
    submitted_at: float


def row_to_resources(row: sqlite3.Row) -> Resources:
    return Resources(
        cpu_millicores=row["cpu_millicores"],
        memory_bytes=row["memory_bytes"],
        disk_bytes=row["disk_bytes"],
        device_type=row["device_type"],
        device_variant=row["device_variant"],
        device_count=row["device_count"],
    )


def job_meta_of(spec_json: str) -> tuple[int, bool]:
    spec = json.loads(spec_json)
    return spec.get("max_task_failures", 0), bool(spec.get("coscheduling"))


@dataclass(frozen=True, slots=True)
class EventRow:
    ts: float
    kind: str
    job_id: str | None
    task_id: str | None
    attempt_uid: str | None
    worker_id: str | None
    message: str


def select_in(cur: sqlite3.Cursor, sql: str, ids: Iterable[str], size: int = 500) -> Iterator[sqlite3.Row]:
    """Run ``sql`` over ``ids`` in chunks SQLite accepts; ``:ids`` in the SQL stands for the IN list."""
    items = list(ids)
    for i in range(0, len(items), size):
        chunk = items[i : i + size]
        yield from cur.execute(sql.replace(":ids", ",".join("?" * len(chunk))), chunk)
