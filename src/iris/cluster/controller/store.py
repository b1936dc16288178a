"""Reads and writes of the controller's tables: the only module that speaks SQL to ControllerDB.

Row types are plain dataclasses so the decision kernels never see a database cursor. Every
change to jobs, tasks, attempts and workers is written by ``commit(cur, effects, now)`` (the
shape is described in effects.py): each write is conditional on the version (tasks, attempts)
or state (jobs) it was decided from, and a change one of whose guards no longer holds is dropped
whole. Snapshots (``round_snapshot``, ``observation_snapshot``, ``job_snapshots``) are the
frozen reads the kernels in round.py decide from.
"""

from __future__ import annotations

import json
import logging
import secrets
import sqlite3
from collections.abc import Iterable, Iterator, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field

from iris.cluster.controller.effects import (
    Applied,
    Assign,
    Change,
    DeleteWorker,
    Effects,
    Event,
    InsertJob,
    MoveAttempt,
    MoveTask,
    SetJob,
    UpsertWorker,
)
from iris.cluster.controller.scheduler.model import Resources
from iris.cluster.controller.task_state import AttemptSnapshot, TaskSnapshot
from iris.cluster.controller.transitions import edge_allowed
from iris.rpc.enums import TERMINAL_JOB_STATES, JobState, PriorityBand, StopReason, TaskState
from iris.rpc.models import EndpointInfo, JobSpec, RegisterRequest, ResourceSpec, WorkerHealth

log = logging.getLogger("iris.controller.store")

# Stored text -> enum member by dict lookup: calling the enum costs ~1 us a value, paid for
# every row a round reads.
_TASK_STATE: dict[str, TaskState] = {s.value: s for s in TaskState}
_JOB_STATE: dict[str, JobState] = {s.value: s for s in JobState}
_BAND: dict[str, PriorityBand] = {b.value: b for b in PriorityBand}
_STOP_REASON: dict[str | None, StopReason | None] = {None: None, "": None, **{r.value: r for r in StopReason}}


@dataclass(frozen=True, slots=True)
class JobRow:
    job_id: str
    name: str
    user: str
    parent_job_id: str | None
    root_job_id: str
    depth: int
    state: JobState
    priority: PriorityBand
    replicas: int
    spec_json: str
    submitted_at: float
    root_submitted_at: float
    started_at: float | None
    finished_at: float | None
    scheduling_deadline: float | None
    error: str | None
    exit_code: int | None
    pending_reason: str | None
    run_uid: str = ""  # this run of the job id (a --replace starts a new one)

    @property
    def spec(self) -> JobSpec:
        return JobSpec.model_validate_json(self.spec_json)


@dataclass(frozen=True, slots=True)
class WorkerRow:
    worker_id: str
    address: str
    capacity: ResourceSpec
    attributes: dict[str, str]
    slice_id: str | None
    scale_group: str | None
    registered_at: float
    last_contact_at: float | None
    health: WorkerHealth | None


@dataclass(frozen=True, slots=True)
class LiveAttempt:
    """An attempt whose runtime is not yet confirmed gone, with what a reconcile plan needs."""

    attempt_uid: str
    task_id: str
    job_id: str
    task_index: int
    attempt_number: int
    worker_id: str | None
    state: TaskState
    stop_reason: StopReason | None
    task_state: TaskState
    current_attempt_uid: str | None


_JOB_COLUMNS = (
    "job_id, name, user, parent_job_id, root_job_id, depth, state, priority, replicas, spec_json, submitted_at,"
    " root_submitted_at, started_at, finished_at, scheduling_deadline, error, exit_code, pending_reason, run_uid"
)


def _job(row: sqlite3.Row) -> JobRow:
    return JobRow(
        job_id=row["job_id"],
        name=row["name"],
        user=row["user"],
        parent_job_id=row["parent_job_id"],
        root_job_id=row["root_job_id"],
        depth=row["depth"],
        state=_JOB_STATE[row["state"]],
        priority=_BAND[row["priority"]],
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


# ---------------------------------------------------------------- jobs


def _insert_job(cur: sqlite3.Cursor, job: InsertJob, now: float) -> None:
    spec, job_id = job.spec, job.job_id
    res = spec.resources
    deadline = now + spec.scheduling_timeout_s if spec.scheduling_timeout_s else None
    cur.execute(
        "INSERT INTO jobs (job_id, name, user, parent_job_id, root_job_id, depth, state, priority, replicas,"
        " spec_json, submitted_at, root_submitted_at, scheduling_deadline, cpu_millicores, memory_bytes,"
        " disk_bytes, device_type, device_variant, device_count, group_by, timeout_s, run_uid)"
        " VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
        (
            job_id,
            spec.name,
            job.user,
            job.parent_job_id,
            job.root_job_id,
            job.depth,
            JobState.PENDING.value,
            spec.priority.value,
            spec.replicas,
            spec.model_dump_json(),
            now,
            job.root_submitted_at,
            deadline,
            res.cpu_millicores,
            res.memory_bytes,
            res.disk_bytes,
            res.device.type if res.device else "",
            res.device.variant if res.device else "",
            res.device.count if res.device else 0,
            spec.coscheduling.group_by if spec.coscheduling else None,
            spec.timeout_s,
            job.run_uid or secrets.token_hex(8),
        ),
    )
    cur.executemany(
        "INSERT INTO tasks (task_id, job_id, task_index, state) VALUES (?,?,?,?)",
        [(f"{job_id}/{i}", job_id, i, TaskState.PENDING.value) for i in range(spec.replicas)],
    )


def job_tree(cur: sqlite3.Cursor, job_id: str) -> list[str]:
    """The job and all its descendants."""
    return [
        r[0]
        for r in cur.execute(
            "SELECT job_id FROM jobs WHERE job_id = ? OR job_id LIKE ?", (job_id, job_id + "/%")
        )
    ]


def delete_job_tree(cur: sqlite3.Cursor, job_id: str) -> None:
    """Remove a finished job and its descendants, with their history (a replaced name is a new run)."""
    like = job_id + "/%"
    cur.execute("DELETE FROM events WHERE job_id = ? OR job_id LIKE ?", (job_id, like))
    cur.execute("DELETE FROM endpoints WHERE job_id = ? OR job_id LIKE ?", (job_id, like))
    cur.execute(
        "DELETE FROM attempts WHERE task_id IN (SELECT task_id FROM tasks WHERE job_id = ? OR job_id LIKE ?)",
        (job_id, like),
    )
    cur.execute(
        "DELETE FROM task_results WHERE task_id IN (SELECT task_id FROM tasks WHERE job_id = ? OR job_id LIKE ?)",
        (job_id, like),
    )
    cur.execute("DELETE FROM tasks WHERE job_id = ? OR job_id LIKE ?", (job_id, like))
    cur.execute("DELETE FROM jobs WHERE job_id = ? OR job_id LIKE ?", (job_id, like))


def get_job(cur: sqlite3.Cursor, job_id: str) -> JobRow | None:
    row = cur.execute(f"SELECT {_JOB_COLUMNS} FROM jobs WHERE job_id = ?", (job_id,)).fetchone()
    return _job(row) if row else None


def get_jobs(cur: sqlite3.Cursor, job_ids: Iterable[str]) -> dict[str, JobRow]:
    ids = list(job_ids)
    out: dict[str, JobRow] = {}
    for row in select_in(cur, f"SELECT {_JOB_COLUMNS} FROM jobs WHERE job_id IN (:ids)", ids):
        out[row["job_id"]] = _job(row)
    return out


def list_jobs(
    cur: sqlite3.Cursor,
    *,
    states: Sequence[str] = (),
    user: str | None = None,
    name_contains: str | None = None,
    parent: str | None = None,
    roots_only: bool = False,
    limit: int = 100,
    offset: int = 0,
    sort: str = "submitted_at",
    descending: bool = True,
    submitted_since: float | None = None,
) -> tuple[list[JobRow], int]:
    where, args = [], []
    if submitted_since is not None:
        where.append("submitted_at >= ?")
        args.append(submitted_since)
    if states:
        where.append(f"state IN ({','.join('?' * len(states))})")
        args.extend(states)
    if user:
        where.append("user = ?")
        args.append(user)
    if name_contains:
        where.append("job_id LIKE ?")
        args.append(f"%{name_contains}%")
    if parent:
        where.append("parent_job_id = ?")
        args.append(parent)
    if roots_only:
        where.append("parent_job_id IS NULL")
    clause = ("WHERE " + " AND ".join(where)) if where else ""
    column = (
        sort
        if sort in ("submitted_at", "job_id", "state", "user", "finished_at", "priority")
        else "submitted_at"
    )
    order = "DESC" if descending else "ASC"
    ordering = f"ORDER BY {column} {order}, job_id {order}"  # one direction: an index walk serves it
    if submitted_since is None and not (user or name_contains or parent):
        # Filtered by state and root-ness at most: the trigger-kept counts answer (db.py).
        kind = "root_job" if roots_only else "job"
        chosen = f" AND state IN ({','.join('?' * len(states))})" if states else ""
        total = cur.execute(
            f"SELECT coalesce(sum(n), 0) FROM state_counts WHERE kind = ?{chosen}", [kind, *states]
        ).fetchone()[0]
    else:
        total = cur.execute(f"SELECT count(*) FROM jobs {clause}", args).fetchone()[0]
    # The page's rowids from the index alone (an OFFSET skips index entries, not whole rows),
    # then those rows.
    rows = cur.execute(
        f"SELECT {_JOB_COLUMNS} FROM jobs WHERE rowid IN"
        f" (SELECT rowid FROM jobs {clause} {ordering} LIMIT ? OFFSET ?) {ordering}",
        [*args, limit, offset],
    ).fetchall()
    return [_job(r) for r in rows], total


def pending_reasons_for_jobs(cur: sqlite3.Cursor, job_ids: Sequence[str]) -> dict[str, str]:
    """One pending reason per job (from any of its waiting tasks), for list views."""
    sql = (
        "SELECT job_id, max(pending_reason) FROM tasks WHERE job_id IN (:ids) AND state IN ('PENDING', 'ASSIGNED')"
        " AND pending_reason IS NOT NULL GROUP BY job_id"
    )
    return {r[0]: r[1] for r in select_in(cur, sql, job_ids)}


def task_counts_for_jobs(cur: sqlite3.Cursor, job_ids: Sequence[str]) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {j: {} for j in job_ids}
    # kept by triggers (db.py migration 5)
    sql = "SELECT job_id, state, n FROM job_task_counts WHERE job_id IN (:ids) AND n > 0"
    for r in select_in(cur, sql, job_ids):
        out[r[0]][r[1]] = r[2]
    return out


def submitted_at(cur: sqlite3.Cursor, job_ids: Iterable[str]) -> dict[str, float]:
    return {
        r[0]: r[1]
        for r in select_in(cur, "SELECT job_id, submitted_at FROM jobs WHERE job_id IN (:ids)", job_ids)
    }


def children_of(cur: sqlite3.Cursor, job_id: str) -> list[str]:
    return [
        r[0]
        for r in cur.execute(
            "SELECT job_id FROM jobs WHERE parent_job_id = ? ORDER BY submitted_at", (job_id,)
        )
    ]


def live_descendants(cur: sqlite3.Cursor, job_id: str) -> list[str]:
    terminal = tuple(
        s.value
        for s in (
            JobState.SUCCEEDED,
            JobState.FAILED,
            JobState.KILLED,
            JobState.WORKER_FAILED,
            JobState.UNSCHEDULABLE,
        )
    )
    return [
        r[0]
        for r in cur.execute(
            f"SELECT job_id FROM jobs WHERE job_id LIKE ? AND state NOT IN ({','.join('?' * len(terminal))})",
            (job_id + "/%", *terminal),
        )
    ]


def job_counts(cur: sqlite3.Cursor, user: str | None = None) -> dict[str, int]:
    if user is not None:
        rows = cur.execute("SELECT state, count(*) FROM jobs WHERE user = ? GROUP BY state", (user,))
    else:  # kept by triggers (db.py migration 5)
        rows = cur.execute("SELECT state, n FROM state_counts WHERE kind = 'job' AND n > 0")
    return {r[0]: r[1] for r in rows}


def task_counts(cur: sqlite3.Cursor, user: str | None = None) -> dict[str, int]:
    if user is not None:
        rows = cur.execute(
            "SELECT t.state, count(*) FROM tasks t JOIN jobs j ON j.job_id = t.job_id WHERE j.user = ? GROUP BY t.state",
            (user,),
        )
    else:  # kept by triggers (db.py migration 5)
        rows = cur.execute("SELECT state, n FROM state_counts WHERE kind = 'task' AND n > 0")
    return {r[0]: r[1] for r in rows}


# ---------------------------------------------------------------- tasks and attempts

_TASK_COLUMNS = (
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


def _task_row(r: sqlite3.Row) -> TaskRow:
    return TaskRow(*r[:3], _TASK_STATE[r[3]], *r[4:])


_ATTEMPT_ROW_SQL = (
    "SELECT a.attempt_uid, a.task_id, a.attempt_number, a.worker_id, w.address, a.state, a.created_at,"
    " a.started_at, a.finished_at, a.exit_code, a.error, a.message"
    " FROM attempts a LEFT JOIN workers w ON w.worker_id = a.worker_id"
)


def _attempt_row(r: sqlite3.Row) -> AttemptRow:
    return AttemptRow(*r[:5], _TASK_STATE[r[5]], *r[6:])


def tasks_of_job(
    cur: sqlite3.Cursor, job_id: str, *, offset: int = 0, limit: int | None = None
) -> list[TaskRow]:
    """The job's tasks by index; ``offset``/``limit`` read one page of them."""
    return [
        _task_row(r)
        for r in cur.execute(
            f"SELECT {_TASK_COLUMNS} FROM tasks t WHERE job_id = ? ORDER BY task_index LIMIT ? OFFSET ?",
            (job_id, -1 if limit is None else limit, offset),
        )
    ]


def get_task(cur: sqlite3.Cursor, task_id: str) -> TaskRow | None:
    row = cur.execute(f"SELECT {_TASK_COLUMNS} FROM tasks t WHERE task_id = ?", (task_id,)).fetchone()
    return _task_row(row) if row is not None else None


def attempts_of_tasks(cur: sqlite3.Cursor, task_ids: Sequence[str]) -> dict[str, list[AttemptRow]]:
    out: dict[str, list[AttemptRow]] = {t: [] for t in task_ids}
    for row in select_in(
        cur, _ATTEMPT_ROW_SQL + " WHERE a.task_id IN (:ids) ORDER BY a.attempt_number", task_ids
    ):
        attempt = _attempt_row(row)
        out[attempt.task_id].append(attempt)
    return out


def get_attempt(cur: sqlite3.Cursor, attempt_uid: str) -> AttemptRow | None:
    """One attempt with its worker's address (None once the worker is gone)."""
    row = cur.execute(_ATTEMPT_ROW_SQL + " WHERE a.attempt_uid = ?", (attempt_uid,)).fetchone()
    return _attempt_row(row) if row is not None else None


def unreleased_attempts(cur: sqlite3.Cursor, worker_ids: Sequence[str] | None = None) -> list[LiveAttempt]:
    sql = (
        "SELECT a.attempt_uid, a.task_id, t.job_id, t.task_index, a.attempt_number, a.worker_id, a.state,"
        " a.stop_reason, t.state AS task_state, t.current_attempt_uid FROM attempts a"
        " JOIN tasks t ON t.task_id = a.task_id WHERE a.released = 0"
    )
    args: list[str] = []
    if worker_ids is not None:
        if not worker_ids:
            return []
        sql += f" AND a.worker_id IN ({','.join('?' * len(worker_ids))})"
        args = list(worker_ids)
    return [
        LiveAttempt(
            attempt_uid=r[0],
            task_id=r[1],
            job_id=r[2],
            task_index=r[3],
            attempt_number=r[4],
            worker_id=r[5],
            state=_TASK_STATE[r[6]],
            stop_reason=_STOP_REASON[r[7]],
            task_state=_TASK_STATE[r[8]],
            current_attempt_uid=r[9],
        )
        for r in cur.execute(sql, args)
    ]


def jobs_with_live_attempts(cur: sqlite3.Cursor, job_ids: Iterable[str]) -> set[str]:
    """Jobs (of those given) that still have an attempt whose process is not confirmed gone."""
    out: set[str] = set()
    for r in select_in(
        cur,
        "SELECT DISTINCT t.job_id FROM attempts a JOIN tasks t ON t.task_id = a.task_id WHERE a.released = 0 AND t.job_id IN (:ids)",
        job_ids,
    ):
        out.add(r[0])
    return out


def task_snapshots(cur: sqlite3.Cursor, task_ids: Iterable[str]) -> dict[str, TaskSnapshot]:
    out: dict[str, TaskSnapshot] = {}
    budgets: dict[str, tuple[int, int]] = {}  # per job: its spec is parsed once, not once a task
    rows = list(
        select_in(
            cur,
            "SELECT t.task_id, t.state, t.current_attempt_uid, t.failure_count, t.preemption_count, t.started_at,"
            " t.finished_at, t.exit_code, t.error, t.job_id, t.version FROM tasks t WHERE t.task_id IN (:ids)",
            task_ids,
        )
    )
    for r in rows:
        job_id = r[9]
        budget = budgets.get(job_id)
        if budget is None:
            budget = budgets[job_id] = _budgets(cur, job_id)
        out[r[0]] = TaskSnapshot(
            r[0], _TASK_STATE[r[1]], r[2], r[3], r[4], budget[0], budget[1], r[5], r[6], r[7], r[8], r[10]
        )
    return out


def _budgets(cur: sqlite3.Cursor, job_id: str) -> tuple[int, int]:
    """The job's (max_retries_failure, max_retries_preemption)."""
    row = cur.execute("SELECT spec_json FROM jobs WHERE job_id = ?", (job_id,)).fetchone()
    return _budgets_of(row[0] if row is not None else "{}")


def _budgets_of(spec_json: str) -> tuple[int, int]:
    spec = json.loads(spec_json)
    return spec.get("max_retries_failure", 0), spec.get("max_retries_preemption", 100)


def attempt_snapshots(cur: sqlite3.Cursor, attempt_uids: Iterable[str]) -> dict[str, AttemptSnapshot]:
    out: dict[str, AttemptSnapshot] = {}
    for r in select_in(
        cur,
        f"SELECT {_ATTEMPT_SNAPSHOT_COLUMNS} FROM attempts WHERE attempt_uid IN (:ids)",
        attempt_uids,
    ):
        out[r[0]] = _attempt_snapshot(r)
    return out


_ATTEMPT_SNAPSHOT_COLUMNS = "attempt_uid, task_id, state, released, stop_reason, started_at, finished_at, exit_code, error, worker_id, version"


def _attempt_snapshot(r: sqlite3.Row) -> AttemptSnapshot:
    return AttemptSnapshot(
        attempt_uid=r[0],
        task_id=r[1],
        state=_TASK_STATE[r[2]],
        released=bool(r[3]),
        stop_reason=_STOP_REASON[r[4]],
        started_at=r[5],
        finished_at=r[6],
        exit_code=r[7],
        error=r[8],
        worker_id=r[9],
        version=r[10],
    )


def next_gang_generations(cur: sqlite3.Cursor, job_ids: Sequence[str]) -> dict[str, int]:
    out = dict.fromkeys(job_ids, 0)
    for r in select_in(
        cur,
        "SELECT t.job_id, max(a.gang_generation) FROM attempts a JOIN tasks t ON t.task_id = a.task_id"
        " WHERE t.job_id IN (:ids) AND a.gang_generation IS NOT NULL GROUP BY t.job_id",
        job_ids,
    ):
        out[r[0]] = r[1] + 1
    return out


def gang_of_attempts(cur: sqlite3.Cursor, attempt_uids: Sequence[str]) -> dict[str, tuple[int, int]]:
    out: dict[str, tuple[int, int]] = {}
    for r in select_in(
        cur,
        "SELECT attempt_uid, gang_generation, gang_size FROM attempts WHERE attempt_uid IN (:ids)"
        " AND gang_generation IS NOT NULL",
        attempt_uids,
    ):
        out[r[0]] = (r[1], r[2])
    return out


def gang_leader_addresses(
    cur: sqlite3.Cursor, gangs: Sequence[tuple[str, int]]
) -> dict[tuple[str, int], str]:
    """(job id, gang generation) -> the address of the worker running that generation's task 0."""
    out: dict[tuple[str, int], str] = {}
    for job_id, generation in set(gangs):
        row = cur.execute(
            "SELECT w.address FROM tasks t JOIN attempts a ON a.task_id = t.task_id"
            " JOIN workers w ON w.worker_id = a.worker_id"
            " WHERE t.job_id = ? AND t.task_index = 0 AND a.gang_generation = ? LIMIT 1",
            (job_id, generation),
        ).fetchone()
        if row is not None:
            out[(job_id, generation)] = row[0]
    return out


def next_attempt_numbers(cur: sqlite3.Cursor, task_ids: Sequence[str]) -> dict[str, int]:
    out = dict.fromkeys(task_ids, 0)
    for r in select_in(
        cur,
        "SELECT task_id, max(attempt_number) FROM attempts WHERE task_id IN (:ids) GROUP BY task_id",
        task_ids,
    ):
        out[r[0]] = r[1] + 1
    return out


@dataclass(frozen=True, slots=True)
class WaitingTask:
    task_id: str
    job_id: str
    pending_reason: str | None
    user: str
    priority: PriorityBand
    submitted_at: float


def waiting_tasks(cur: sqlite3.Cursor, limit: int, *, user: str | None = None) -> list[WaitingTask]:
    """Tasks not yet running that carry a pending reason, oldest job first (the scheduler view);
    ``user``: that user's only."""
    mine = " AND j.user = ?" if user is not None else ""
    return [
        WaitingTask(r[0], r[1], r[2], r[3], _BAND[r[4]], r[5])
        for r in cur.execute(
            "SELECT t.task_id, t.job_id, t.pending_reason, j.user, j.priority, j.submitted_at FROM tasks t"
            " JOIN jobs j ON j.job_id = t.job_id WHERE t.state IN ('PENDING', 'ASSIGNED') AND t.pending_reason IS NOT NULL"
            f"{mine} ORDER BY j.submitted_at LIMIT ?",
            (limit,) if user is None else (user, limit),
        )
    ]


# ---------------------------------------------------------------- workers


def _upsert_worker(cur: sqlite3.Cursor, worker_id: str, req: RegisterRequest, now: float) -> None:
    address, capacity, attributes = req.address, req.capacity, req.attributes
    slice_id, scale_group = req.slice_id, req.scale_group
    cur.execute(
        "INSERT INTO workers (worker_id, address, capacity_json, slice_id, scale_group, registered_at, last_contact_at, active)"
        " VALUES (?,?,?,?,?,?,?,1) ON CONFLICT(worker_id) DO UPDATE SET address=excluded.address,"
        " capacity_json=excluded.capacity_json, slice_id=excluded.slice_id, scale_group=excluded.scale_group,"
        " last_contact_at=excluded.last_contact_at, active=1",
        (worker_id, address, capacity.model_dump_json(), slice_id, scale_group, now, now),
    )
    cur.execute("DELETE FROM worker_attributes WHERE worker_id = ?", (worker_id,))
    cur.executemany(
        "INSERT INTO worker_attributes (worker_id, key, value) VALUES (?,?,?)",
        [(worker_id, k, v) for k, v in attributes.items()],
    )


def list_workers(cur: sqlite3.Cursor) -> list[WorkerRow]:
    attrs: dict[str, dict[str, str]] = {}
    for r in cur.execute("SELECT worker_id, key, value FROM worker_attributes"):
        attrs.setdefault(r[0], {})[r[1]] = r[2]
    return [
        WorkerRow(
            worker_id=r["worker_id"],
            address=r["address"],
            capacity=ResourceSpec.model_validate_json(r["capacity_json"]),
            attributes=attrs.get(r["worker_id"], {}),
            slice_id=r["slice_id"],
            scale_group=r["scale_group"],
            registered_at=r["registered_at"],
            last_contact_at=r["last_contact_at"],
            health=WorkerHealth.model_validate_json(r["health_json"]) if r["health_json"] else None,
        )
        for r in cur.execute("SELECT * FROM workers WHERE active = 1 ORDER BY worker_id")
    ]


def worker_ids_at_address(cur: sqlite3.Cursor, address: str) -> list[str]:
    return [
        r[0]
        for r in cur.execute("SELECT worker_id FROM workers WHERE address = ? AND active = 1", (address,))
    ]


def touch_workers(cur: sqlite3.Cursor, contacts: Sequence[tuple[float, str | None, str]]) -> None:
    cur.executemany(
        "UPDATE workers SET last_contact_at = ?, health_json = COALESCE(?, health_json) WHERE worker_id = ?",
        contacts,
    )


# ---------------------------------------------------------------- endpoints


def upsert_endpoint(
    cur: sqlite3.Cursor,
    *,
    namespace: str,
    name: str,
    address: str,
    job_id: str,
    task_id: str | None,
    metadata: dict[str, str],
    now: float,
) -> None:
    cur.execute(
        "INSERT INTO endpoints (namespace, name, address, job_id, task_id, metadata_json, registered_at) VALUES (?,?,?,?,?,?,?)"
        " ON CONFLICT(namespace, name) DO UPDATE SET address=excluded.address, job_id=excluded.job_id,"
        " task_id=excluded.task_id, metadata_json=excluded.metadata_json, registered_at=excluded.registered_at",
        (namespace, name, address, job_id, task_id, json.dumps(metadata), now),
    )


def list_endpoints(
    cur: sqlite3.Cursor, *, namespace: str | None = None, name: str | None = None
) -> list[EndpointInfo]:
    where, args = [], []
    if namespace:
        where.append("namespace = ?")
        args.append(namespace)
    if name:
        where.append("name = ?")
        args.append(name)
    clause = ("WHERE " + " AND ".join(where)) if where else ""
    return [
        EndpointInfo(
            name=r["name"],
            namespace=r["namespace"],
            address=r["address"],
            job_id=r["job_id"],
            task_id=r["task_id"],
            metadata=json.loads(r["metadata_json"]),
            registered_at=r["registered_at"],
        )
        for r in cur.execute(
            "SELECT namespace, name, address, job_id, task_id, metadata_json, registered_at FROM endpoints"
            f" {clause} ORDER BY namespace, name LIMIT 1000",
            args,
        )
    ]


def worker_ids(cur: sqlite3.Cursor) -> list[str]:
    return [r[0] for r in cur.execute("SELECT worker_id FROM workers")]


def referenced_bundles(cur: sqlite3.Cursor) -> set[str]:
    """Bundle ids named by jobs that have not finished."""
    terminal = sorted(s.value for s in TERMINAL_JOB_STATES)
    marks = ",".join("?" * len(terminal))
    rows = cur.execute(
        "SELECT DISTINCT json_extract(spec_json, '$.bundle_id') FROM jobs"
        f" WHERE state NOT IN ({marks}) AND json_extract(spec_json, '$.bundle_id') IS NOT NULL",
        terminal,
    ).fetchall()
    return {row[0] for row in rows}


def last_autoscaler_action_id(cur: sqlite3.Cursor) -> int:
    return int(cur.execute("SELECT COALESCE(MAX(id), 0) FROM autoscaler_actions").fetchone()[0])


def autoscaler_actions_since(cur: sqlite3.Cursor, last_id: int) -> list[tuple[int, str, str]]:
    """(id, scale group, action) of every autoscaler action logged after ``last_id``, oldest first."""
    return [
        (r[0], r[1], r[2])
        for r in cur.execute(
            "SELECT id, scale_group, action FROM autoscaler_actions WHERE id > ? ORDER BY id", (last_id,)
        )
    ]


# ---------------------------------------------------------------- meta


def meta_value(cur: sqlite3.Cursor, key: str) -> str | None:
    row = cur.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
    return row[0] if row else None


def set_meta_value(cur: sqlite3.Cursor, key: str, value: str) -> None:
    cur.execute(
        "INSERT INTO meta (key, value) VALUES (?, ?) ON CONFLICT(key) DO UPDATE SET value = excluded.value",
        (key, value),
    )


# ---------------------------------------------------------------- round snapshots


@dataclass(frozen=True, slots=True)
class PendingTask:
    task_id: str
    job_id: str
    version: int
    pending_reason: str | None
    user: str
    priority: PriorityBand
    depth: int
    root_submitted_at: float
    submitted_at: float
    group_by: str | None
    resources: Resources
    spec_json: str


@dataclass(frozen=True, slots=True)
class AttemptUsage:
    """One unreleased attempt on a worker: what it holds there and whether it still runs."""

    worker_id: str
    task_id: str
    job_id: str
    state: TaskState
    stop_reason: StopReason | None
    started_at: float | None
    priority: PriorityBand
    group_by: str | None
    resources: Resources
    user: str = ""


@dataclass(frozen=True)
class RoundSnapshot:
    pending: list[PendingTask] = field(default_factory=list)
    workers: list[WorkerRow] = field(default_factory=list)
    usage: list[AttemptUsage] = field(default_factory=list)
    # Gang jobs with pending members whose earlier members are still stopping.
    stopping_gangs: frozenset[str] = frozenset()
    # RUNNING tasks past their job's execution timeout, with their current attempt.
    timed_out: list[tuple[TaskSnapshot, AttemptSnapshot | None]] = field(default_factory=list)
    # Waiting tasks past their job's scheduling deadline, with their attempt and pending reason.
    expired: list[tuple[TaskSnapshot, AttemptSnapshot | None, str | None]] = field(default_factory=list)


@dataclass(frozen=True)
class ObservationSnapshot:
    """The attempts observed (with their workers) and their tasks, as the kernel folds them."""

    attempts: Mapping[str, AttemptSnapshot]
    tasks: Mapping[str, TaskSnapshot]


@dataclass(frozen=True)
class JobSnapshot:
    """A job with all its tasks and their current attempts: what a roll-up or a kill decides from."""

    job: JobRow
    tasks: tuple[TaskSnapshot, ...]
    attempts: Mapping[str, AttemptSnapshot]
    max_task_failures: int
    coscheduled: bool


def _resources(row: sqlite3.Row) -> Resources:
    return Resources(
        cpu_millicores=row["cpu_millicores"],
        memory_bytes=row["memory_bytes"],
        disk_bytes=row["disk_bytes"],
        device_type=row["device_type"],
        device_variant=row["device_variant"],
        device_count=row["device_count"],
    )


_PENDING_COLUMNS = (
    "t.task_id, t.job_id, t.version, t.pending_reason, j.user, j.priority, j.depth,"
    " j.root_submitted_at, j.submitted_at, j.group_by, j.cpu_millicores, j.memory_bytes, j.disk_bytes,"
    " j.device_type, j.device_variant, j.device_count, j.spec_json"
)
# Over the limit, the tasks a round considers: higher bands first, then older jobs, each job at
# most a share of the limit, so no backlog (a huge job, or many) hides a later job from the kernel.
_PENDING_BY_BAND_SQL = (
    f"SELECT {_PENDING_COLUMNS} FROM"
    " (SELECT task_id, job_id, version, pending_reason, task_index,"
    "  ROW_NUMBER() OVER (PARTITION BY job_id ORDER BY task_index) AS n FROM tasks WHERE state = 'PENDING') t"
    " JOIN jobs j ON j.job_id = t.job_id WHERE t.n <= ?"
    " ORDER BY CASE j.priority WHEN 'PRODUCTION' THEN 0 WHEN 'INTERACTIVE' THEN 1 ELSE 2 END,"
    " j.root_submitted_at, j.submitted_at, j.job_id, t.task_index LIMIT ?"
)


def pending_tasks(cur: sqlite3.Cursor, limit: int = 100_000) -> list[PendingTask]:
    """The PENDING tasks a round considers, with their job's scheduling fields (one Resources per job).

    Up to ``limit``, all of them (the kernel orders them); past it, a band-ordered share per job."""
    (count,) = cur.execute("SELECT COUNT(*) FROM tasks WHERE state = 'PENDING'").fetchone()
    if count > limit:
        rows = cur.execute(_PENDING_BY_BAND_SQL, (max(1, min(10_000, limit // 10)), limit))
    else:
        rows = cur.execute(
            f"SELECT {_PENDING_COLUMNS} FROM tasks t JOIN jobs j ON j.job_id = t.job_id WHERE t.state = 'PENDING'"
        )
    return _pending_rows(rows)


def pending_tasks_of(cur: sqlite3.Cursor, jobs: Iterable[str], tasks: Iterable[str]) -> list[PendingTask]:
    """The PENDING tasks of ``jobs``, and those of ``tasks`` still PENDING (a pass over new work).

    A gang is placed whole, so a gang member brings every pending member of its job."""
    job_ids = set(jobs)
    singles = []
    for r in select_in(cur, _PENDING_IN_SQL.format(column="t.task_id"), sorted(set(tasks))):
        if r[1] in job_ids:
            continue
        if r[9]:  # group_by: the task's job is a gang
            job_ids.add(r[1])
        else:
            singles.append(r)
    rows = list(select_in(cur, _PENDING_IN_SQL.format(column="t.job_id"), sorted(job_ids)))
    return _pending_rows(rows + singles)


_PENDING_IN_SQL = (
    f"SELECT {_PENDING_COLUMNS} FROM tasks t JOIN jobs j ON j.job_id = t.job_id"
    " WHERE {column} IN (:ids) AND t.state = 'PENDING'"
)


def _pending_rows(rows: Iterable[sqlite3.Row]) -> list[PendingTask]:
    per_job: dict[str, tuple[PriorityBand, Resources]] = {}
    out = []
    for r in rows:
        job = per_job.get(r[1])
        if job is None:
            job = per_job[r[1]] = (_BAND[r[5]], Resources(r[10], r[11], r[12], r[13], r[14], r[15]))
        out.append(PendingTask(r[0], r[1], r[2], r[3], r[4], job[0], r[6], r[7], r[8], r[9], job[1], r[16]))
    return out


def worker_usage(cur: sqlite3.Cursor) -> list[AttemptUsage]:
    """Per unreleased attempt on a worker: its resources, band and whether it still runs."""
    return [
        AttemptUsage(
            worker_id=r["worker_id"],
            task_id=r["task_id"],
            job_id=r["job_id"],
            state=_TASK_STATE[r["state"]],
            stop_reason=_STOP_REASON[r["stop_reason"]],
            started_at=r["started_at"],
            priority=_BAND[r["priority"]],
            group_by=r["group_by"],
            resources=_resources(r),
            user=r["user"],
        )
        for r in cur.execute(
            "SELECT a.worker_id, a.task_id, a.state, a.stop_reason, a.started_at, t.job_id, j.user, j.priority, j.group_by,"
            " j.cpu_millicores, j.memory_bytes, j.disk_bytes, j.device_type, j.device_variant, j.device_count"
            " FROM attempts a JOIN tasks t ON t.task_id = a.task_id JOIN jobs j ON j.job_id = t.job_id"
            " WHERE a.released = 0 AND a.worker_id IS NOT NULL"
        )
    ]


@dataclass(frozen=True, slots=True)
class Fleet:
    """The workers and what their unreleased attempts hold: what a pass places against."""

    workers: list[WorkerRow]
    usage: list[AttemptUsage]


def fleet(cur: sqlite3.Cursor) -> Fleet:
    return Fleet(list_workers(cur), worker_usage(cur))


def round_snapshot(
    cur: sqlite3.Cursor,
    now: float,
    *,
    with_fleet: bool = True,
    with_deadlines: bool = True,
    known_fleet: Fleet | None = None,
    only: tuple[AbstractSet[str], AbstractSet[str]] | None = None,
) -> RoundSnapshot:
    """Everything one scheduling pass decides from, read at once.

    ``only`` = (jobs, tasks): the pass considers just these jobs' and tasks' pending tasks (new
    work, see scheduler/queue.py); None: every pending task. ``known_fleet`` was read in the same
    read (the queue needed it to decide ``only``)."""
    pending = pending_tasks(cur) if only is None else pending_tasks_of(cur, *only)
    gang_jobs = {p.job_id for p in pending if p.group_by}
    stopping = frozenset(jobs_with_live_attempts(cur, gang_jobs)) if gang_jobs else frozenset()
    fleet_now = known_fleet or (fleet(cur) if with_fleet and pending else Fleet([], []))
    workers, usage = (fleet_now.workers, fleet_now.usage) if pending else ([], [])
    timed_out: list[tuple[TaskSnapshot, AttemptSnapshot | None]] = []
    expired: list[tuple[TaskSnapshot, AttemptSnapshot | None, str | None]] = []
    if with_deadlines:
        late = [
            r[0]
            for r in cur.execute(
                # Jobs outermost, through the partial index of live jobs with a timeout (db.py
                # migration 7), then each one's tasks: never a walk of every PENDING task.
                "SELECT t.task_id FROM jobs j INDEXED BY jobs_live_with_timeout"
                " CROSS JOIN tasks t INDEXED BY tasks_job ON t.job_id = j.job_id"
                " WHERE j.timeout_s IS NOT NULL AND j.state IN ('PENDING', 'RUNNING')"
                " AND t.state = 'RUNNING' AND t.started_at IS NOT NULL AND ? - t.started_at > j.timeout_s",
                (now,),
            )
        ]
        rows = cur.execute(
            "SELECT t.task_id, t.pending_reason FROM jobs j INDEXED BY jobs_unstarted_with_deadline"
            " CROSS JOIN tasks t INDEXED BY tasks_job ON t.job_id = j.job_id"
            " WHERE j.scheduling_deadline IS NOT NULL AND j.started_at IS NULL"
            " AND j.state IN ('PENDING', 'RUNNING') AND j.scheduling_deadline < ?"
            " AND t.state IN ('PENDING', 'ASSIGNED')",
            (now,),
        ).fetchall()
        reasons = {r[0]: r[1] for r in rows}
        if late or reasons:
            tasks = task_snapshots(cur, [*late, *reasons])
            attempts = attempt_snapshots(
                cur, [t.current_attempt_uid for t in tasks.values() if t.current_attempt_uid]
            )
            for task_id in late:
                task = tasks[task_id]
                timed_out.append((task, attempts.get(task.current_attempt_uid or "")))
            for task_id, reason in reasons.items():
                task = tasks[task_id]
                expired.append((task, attempts.get(task.current_attempt_uid or ""), reason))
    return RoundSnapshot(
        pending=pending,
        workers=workers,
        usage=usage,
        stopping_gangs=stopping,
        timed_out=timed_out,
        expired=expired,
    )


def observation_snapshot(cur: sqlite3.Cursor, attempt_uids: Iterable[str]) -> ObservationSnapshot:
    attempts = attempt_snapshots(cur, attempt_uids)
    tasks = task_snapshots(cur, {a.task_id for a in attempts.values()})
    return ObservationSnapshot(attempts=attempts, tasks=tasks)


def worker_snapshot(cur: sqlite3.Cursor, worker_id: str) -> ObservationSnapshot:
    """The worker's unreleased attempts and their tasks (what reaping it must settle)."""
    return observation_snapshot(cur, [a.attempt_uid for a in unreleased_attempts(cur, [worker_id])])


@dataclass(frozen=True)
class JobRollup:
    """A live job and the histogram of its tasks' states: enough to roll most jobs up."""

    job: JobRow
    counts: Mapping[TaskState, int]
    max_task_failures: int
    coscheduled: bool
    # The earliest start of its tasks, read only for a job never seen running whose tasks all
    # succeeded (quick tasks may never be seen RUNNING): the roll-up ends it with that start.
    first_task_start: float | None = None


def _job_meta(spec_json: str) -> tuple[int, bool]:
    spec = json.loads(spec_json)
    return spec.get("max_task_failures", 0), bool(spec.get("coscheduling"))


def job_rollups(cur: sqlite3.Cursor, job_ids: Iterable[str]) -> list[JobRollup]:
    jobs = [j for j in get_jobs(cur, job_ids).values() if j.state not in TERMINAL_JOB_STATES]
    counts: dict[str, dict[TaskState, int]] = {j.job_id: {} for j in jobs}
    for r in select_in(
        cur,
        "SELECT job_id, state, n FROM job_task_counts WHERE job_id IN (:ids) AND n > 0",
        list(counts),
    ):
        counts[r[0]][_TASK_STATE[r[1]]] = r[2]
    out = []
    for j in jobs:
        max_failures, coscheduled = _job_meta(j.spec_json)
        first_start = None
        if j.started_at is None and counts[j.job_id].keys() == {TaskState.SUCCEEDED}:
            (first_start,) = cur.execute(
                "SELECT MIN(started_at) FROM tasks WHERE job_id = ?", (j.job_id,)
            ).fetchone()
        out.append(JobRollup(j, counts[j.job_id], max_failures, coscheduled, first_start))
    return out


def job_snapshots(cur: sqlite3.Cursor, job_ids: Iterable[str]) -> list[JobSnapshot]:
    """Live jobs (of those given) with every task and each task's current attempt."""
    jobs = [j for j in get_jobs(cur, job_ids).values() if j.state not in TERMINAL_JOB_STATES]
    if not jobs:
        return []
    by_job: dict[str, list[TaskSnapshot]] = {j.job_id: [] for j in jobs}
    budgets: dict[str, tuple[int, int]] = {}
    meta: dict[str, tuple[int, bool]] = {}
    for j in jobs:
        budgets[j.job_id] = _budgets_of(j.spec_json)
        meta[j.job_id] = _job_meta(j.spec_json)
    for r in select_in(
        cur,
        "SELECT task_id, job_id, state, current_attempt_uid, failure_count, preemption_count, started_at,"
        " finished_at, exit_code, error, version FROM tasks WHERE job_id IN (:ids) ORDER BY job_id, task_index",
        list(by_job),
    ):
        budget = budgets[r[1]]
        by_job[r[1]].append(
            TaskSnapshot(
                r[0], _TASK_STATE[r[2]], r[3], r[4], r[5], budget[0], budget[1], r[6], r[7], r[8], r[9], r[10]
            )
        )
    uids = [t.current_attempt_uid for ts in by_job.values() for t in ts if t.current_attempt_uid]
    attempts = attempt_snapshots(cur, uids)
    return [
        JobSnapshot(
            job=j,
            tasks=tuple(by_job[j.job_id]),
            attempts={
                t.current_attempt_uid: attempts[t.current_attempt_uid]
                for t in by_job[j.job_id]
                if t.current_attempt_uid in attempts
            },
            max_task_failures=meta[j.job_id][0],
            coscheduled=meta[j.job_id][1],
        )
        for j in jobs
    ]


# ---------------------------------------------------------------- the guarded commit


class CommitInvariantError(RuntimeError):
    """A guarded write matched a different number of rows than its guard check promised."""


def writes_so_far(cur: sqlite3.Cursor) -> int:
    """How many rows this connection has written since it opened: unchanged between a snapshot and
    a commit means no row moved in between (only the controller's one connection writes the file)."""
    return cur.connection.total_changes


def commit(cur: sqlite3.Cursor, effects: Effects, now: float, *, read_at: int | None = None) -> Applied:
    """Apply ``effects`` in the caller's transaction; drop every change a guard refuses.

    Guards are checked against the rows as they are now (under the transaction), changes in
    order: a change applied earlier in the same commit moves the versions later ones see.
    ``read_at`` is ``writes_so_far`` when every task and attempt the effects name was read: if no
    row was written since, those rows are still exactly as read and are not read back (each
    write still names its version, and a write that matches no row aborts the transaction).
    """
    applied = Applied()
    task_ids: set[str] = set()
    attempt_uids: set[str] = set()
    job_ids: set[str] = set()
    worker_ids: set[str] = set()
    unchanged = read_at is not None and writes_so_far(cur) == read_at
    task_rows: dict[str, tuple[int, TaskState]] = {}
    attempt_rows: dict[str, tuple[int, str | None]] = {}
    for change in effects.changes:
        for w in change.writes:
            if isinstance(w, MoveTask):
                task_ids.add(w.before.task_id)
                if unchanged:
                    task_rows.setdefault(w.before.task_id, (w.before.version, w.before.state))
            elif isinstance(w, MoveAttempt):
                attempt_uids.add(w.before.attempt_uid)
                if unchanged:
                    attempt_rows.setdefault(w.before.attempt_uid, (w.before.version, w.before.worker_id))
            elif isinstance(w, Assign):
                task_ids.add(w.task_id)
                if unchanged:
                    task_rows.setdefault(w.task_id, (w.task_version, TaskState.PENDING))
                if w.worker_id is not None:
                    worker_ids.add(w.worker_id)
            elif isinstance(w, SetJob):
                job_ids.add(w.job_id)
    if not unchanged:
        task_rows = {
            r[0]: (r[1], _TASK_STATE[r[2]])
            for r in select_in(
                cur, "SELECT task_id, version, state FROM tasks WHERE task_id IN (:ids)", task_ids
            )
        }
        attempt_rows = {
            r[0]: (r[1], r[2])
            for r in select_in(
                cur,
                "SELECT attempt_uid, version, worker_id FROM attempts WHERE attempt_uid IN (:ids)",
                attempt_uids,
            )
        }
    job_rows = {
        r[0]: _JOB_STATE[r[1]]
        for r in select_in(cur, "SELECT job_id, state FROM jobs WHERE job_id IN (:ids)", job_ids)
    }
    live_workers = {
        r[0]
        for r in select_in(
            cur, "SELECT worker_id FROM workers WHERE worker_id IN (:ids) AND active = 1", worker_ids
        )
    }

    task_writes: list[MoveTask] = []
    attempt_writes: list[MoveAttempt] = []
    assign_groups: list[list[Assign]] = []
    job_writes: list[SetJob] = []
    others: list[InsertJob | UpsertWorker | DeleteWorker] = []
    events: list[Event] = []
    for change in effects.changes:
        verdict = _guards_hold(change, task_rows, attempt_rows, job_rows, live_workers)
        if verdict is not None:
            (applied.refused if verdict == "refused" else applied.dropped).append(change)
            continue
        assigns: list[Assign] = []
        for w in change.writes:
            if isinstance(w, MoveTask):
                version, _ = task_rows[w.before.task_id]
                task_rows[w.before.task_id] = (version + 1, w.after.state)
                task_writes.append(w)
                applied.jobs.add(w.before.task_id.rsplit("/", 1)[0])
            elif isinstance(w, MoveAttempt):
                version, worker_id = attempt_rows[w.before.attempt_uid]
                attempt_rows[w.before.attempt_uid] = (version + 1, worker_id)
                attempt_writes.append(w)
                if worker_id:
                    applied.workers.add(worker_id)
            elif isinstance(w, Assign):
                version, _ = task_rows[w.task_id]
                task_rows[w.task_id] = (version + 1, TaskState.ASSIGNED)
                assigns.append(w)
                applied.jobs.add(w.job_id)
                if w.worker_id is not None:
                    applied.workers.add(w.worker_id)
            elif isinstance(w, SetJob):
                job_rows[w.job_id] = w.state
                job_writes.append(w)
                if w.state in TERMINAL_JOB_STATES:
                    applied.finished_jobs.append(w.job_id)
            else:
                others.append(w)
        if assigns:
            assign_groups.append(assigns)
        events.extend(change.events)
        applied.changes.append(change)

    applied.fleet_changed = any(isinstance(w, UpsertWorker | DeleteWorker) for w in others)
    for w in others:
        if isinstance(w, InsertJob):
            if w.replaces is not None:
                delete_job_tree(cur, w.replaces)
            _insert_job(cur, w, now)
        elif isinstance(w, UpsertWorker):
            _upsert_worker(cur, w.worker_id, w.request, now)
    _write_assignments(cur, assign_groups, now, applied)
    _write_tasks(cur, task_writes)
    _write_attempts(cur, attempt_writes)
    _write_jobs(cur, job_writes)
    for w in others:
        if isinstance(w, DeleteWorker):
            cur.execute("DELETE FROM workers WHERE worker_id = ?", (w.worker_id,))
            cur.execute("DELETE FROM worker_attributes WHERE worker_id = ?", (w.worker_id,))
    if events:
        cur.executemany(
            "INSERT INTO events (ts, kind, job_id, task_id, attempt_uid, worker_id, message) VALUES (?,?,?,?,?,?,?)",
            [(now, e.kind.value, e.job_id, e.task_id, e.attempt_uid, e.worker_id, e.message) for e in events],
        )
    if effects.notes:
        cur.executemany(
            "UPDATE tasks SET pending_reason = ? WHERE task_id = ? AND state = ?",
            [(n.reason, n.task_id, n.state) for n in effects.notes],
        )
    if applied.dropped:
        log.debug("commit dropped %d stale change(s)", len(applied.dropped))
    return applied


def _guards_hold(
    change: Change,
    tasks: Mapping[str, tuple[int, TaskState]],
    attempts: Mapping[str, tuple[int, str | None]],
    jobs: Mapping[str, JobState],
    live_workers: set[str],
) -> str | None:
    """None when every guard holds; "stale" when a row moved on; "refused" for an unlisted edge."""
    for w in change.writes:
        if isinstance(w, MoveTask):
            row = tasks.get(w.before.task_id)
            if row is None or row[0] != w.before.version:
                return "stale"
            if not edge_allowed(w.before.state, w.after.state):
                log.error(
                    "refused task %s: %s -> %s is not a listed transition",
                    w.before.task_id,
                    w.before.state,
                    w.after.state,
                )
                return "refused"
        elif isinstance(w, MoveAttempt):
            row = attempts.get(w.before.attempt_uid)
            if row is None or row[0] != w.before.version:
                return "stale"
        elif isinstance(w, Assign):
            row = tasks.get(w.task_id)
            if row is None or row[0] != w.task_version or row[1] is not TaskState.PENDING:
                return "stale"
            if w.worker_id is not None and w.worker_id not in live_workers:
                return "stale"
        elif isinstance(w, SetJob):
            if jobs.get(w.job_id) is not w.before:
                return "stale"
    return None


def _check(cur: sqlite3.Cursor, expected: int, what: str) -> None:
    if cur.rowcount != expected:
        raise CommitInvariantError(f"{what}: {cur.rowcount} row(s) matched their guard, {expected} expected")


def _write_assignments(cur: sqlite3.Cursor, groups: list[list[Assign]], now: float, applied: Applied) -> None:
    if not groups:
        return
    assigns = [a for g in groups for a in g]
    numbers = next_attempt_numbers(cur, [a.task_id for a in assigns])
    gang_jobs = sorted({a.job_id for a in assigns if a.gang})
    generations = next_gang_generations(cur, gang_jobs) if gang_jobs else {}
    rows = []
    for group in groups:
        for a in group:
            gang = (generations[a.job_id], len(group)) if a.gang else (None, None)
            uid = secrets.token_hex(8)
            rows.append(
                (uid, a.task_id, numbers[a.task_id], a.worker_id, TaskState.ASSIGNED.value, now, *gang)
            )
            applied.attempts[a.task_id] = (uid, numbers[a.task_id])
        if group[0].gang:
            generations[group[0].job_id] += 1
    cur.executemany(
        "INSERT INTO attempts (attempt_uid, task_id, attempt_number, worker_id, state, created_at, gang_generation, gang_size)"
        " VALUES (?,?,?,?,?,?,?,?)",
        rows,
    )
    cur.executemany(
        "UPDATE tasks SET state='ASSIGNED', current_attempt_uid=?, worker_id=?, pending_reason=NULL,"
        " version=version+1 WHERE task_id=? AND version=? AND state='PENDING'",
        [(applied.attempts[a.task_id][0], a.worker_id, a.task_id, a.task_version) for a in assigns],
    )
    _check(cur, len(assigns), "assignments")


def _write_tasks(cur: sqlite3.Cursor, moves: list[MoveTask]) -> None:
    if not moves:
        return
    cur.executemany(
        "UPDATE tasks SET state=?, current_attempt_uid=?, failure_count=?, preemption_count=?, started_at=?,"
        " finished_at=?, exit_code=?, error=?, pending_reason=?, version=version+1 WHERE task_id=? AND version=?",
        [
            (
                m.after.state.value,
                m.after.current_attempt_uid,
                m.after.failure_count,
                m.after.preemption_count,
                m.after.started_at,
                m.after.finished_at,
                m.after.exit_code,
                m.after.error,
                m.pending_reason,
                m.before.task_id,
                m.before.version,
            )
            for m in moves
        ],
    )
    _check(cur, len(moves), "task moves")


def _write_attempts(cur: sqlite3.Cursor, moves: list[MoveAttempt]) -> None:
    if not moves:
        return
    cur.executemany(
        "UPDATE attempts SET state=?, released=?, stop_reason=?, started_at=?, finished_at=?, exit_code=?, error=?,"
        " message=COALESCE(?, message), version=version+1 WHERE attempt_uid=? AND version=?",
        [
            (
                m.after.state.value,
                int(m.after.released),
                m.after.stop_reason.value if m.after.stop_reason else None,
                m.after.started_at,
                m.after.finished_at,
                m.after.exit_code,
                m.after.error,
                m.message,
                m.before.attempt_uid,
                m.before.version,
            )
            for m in moves
        ],
    )
    _check(cur, len(moves), "attempt moves")


def _write_jobs(cur: sqlite3.Cursor, moves: list[SetJob]) -> None:
    for m in moves:
        if m.state in TERMINAL_JOB_STATES:
            cur.execute(
                "UPDATE jobs SET state=?, started_at=COALESCE(started_at, ?), finished_at=?, error=?, exit_code=?"
                " WHERE job_id=? AND state=?",
                (m.state.value, m.started_at, m.finished_at, m.error, m.exit_code, m.job_id, m.before.value),
            )
            _check(cur, 1, f"job {m.job_id}")
            cur.execute(
                "DELETE FROM endpoints WHERE job_id = ? OR job_id LIKE ?", (m.job_id, m.job_id + "/%")
            )
        else:
            cur.execute(
                "UPDATE jobs SET state=?, started_at=COALESCE(started_at, ?) WHERE job_id=? AND state=?",
                (m.state.value, m.started_at, m.job_id, m.before.value),
            )
            _check(cur, 1, f"job {m.job_id}")


# ---------------------------------------------------------------- events


@dataclass(frozen=True, slots=True)
class EventRow:
    ts: float
    kind: str
    job_id: str | None
    task_id: str | None
    attempt_uid: str | None
    worker_id: str | None
    message: str


def job_events(cur: sqlite3.Cursor, job_id: str, limit: int = 200) -> list[EventRow]:
    """The job's newest events first."""
    return [
        EventRow(*r)
        for r in cur.execute(
            "SELECT ts, kind, job_id, task_id, attempt_uid, worker_id, message FROM events WHERE job_id = ?"
            " ORDER BY id DESC LIMIT ?",
            (job_id, limit),
        )
    ]


def select_in(cur: sqlite3.Cursor, sql: str, ids: Iterable[str], size: int = 500) -> Iterator[sqlite3.Row]:
    """Run ``sql`` over ``ids`` in chunks SQLite accepts; ``:ids`` in the SQL stands for the IN list."""
    items = list(ids)
    for i in range(0, len(items), size):
        chunk = items[i : i + size]
        yield from cur.execute(sql.replace(":ids", ",".join("?" * len(chunk))), chunk)


# ---------------------------------------------------------------- reads for the log store's API


def tasks_in_tree(cur: sqlite3.Cursor, job_id: str, *, include_children: bool) -> list[TaskRow]:
    """A job's tasks (and, with ``include_children``, its sub-jobs' tasks)."""
    if include_children:
        rows = cur.execute(
            f"SELECT {_TASK_COLUMNS} FROM tasks t WHERE job_id = ? OR (job_id > ? AND job_id < ?)",
            (job_id, job_id + "/", job_id + "0"),  # '0' sorts right after '/'
        )
    else:
        rows = cur.execute(f"SELECT {_TASK_COLUMNS} FROM tasks t WHERE job_id = ?", (job_id,))
    return [_task_row(r) for r in rows]


def attempt_rows(cur: sqlite3.Cursor, attempt_uids: Iterable[str]) -> dict[str, AttemptRow]:
    rows = select_in(cur, _ATTEMPT_ROW_SQL + " WHERE a.attempt_uid IN (:ids)", attempt_uids)
    return {attempt.attempt_uid: attempt for attempt in map(_attempt_row, rows)}


def user_has_bundle(cur: sqlite3.Cursor, user: str, bundle_id: str) -> bool:
    """Whether ``user`` uploaded this workspace bundle, or an admin gave them a job that runs from it."""
    row = (
        cur.execute(
            "SELECT 1 FROM bundle_owners WHERE bundle_id = ? AND user = ?", (bundle_id, user)
        ).fetchone()
        or cur.execute(
            "SELECT 1 FROM jobs WHERE user = ? AND json_extract(spec_json, '$.bundle_id') = ? LIMIT 1",
            (user, bundle_id),
        ).fetchone()
    )
    return row is not None


def add_bundle_owner(cur: sqlite3.Cursor, bundle_id: str, user: str) -> bool:
    """Record that ``user`` uploaded the bundle; True if they had not before."""
    cur.execute("INSERT OR IGNORE INTO bundle_owners (bundle_id, user) VALUES (?, ?)", (bundle_id, user))
    return cur.rowcount > 0


def forget_bundle_owners(cur: sqlite3.Cursor, bundle_ids: Sequence[str]) -> None:
    cur.executemany("DELETE FROM bundle_owners WHERE bundle_id = ?", [(b,) for b in bundle_ids])


def last_preemptors(cur: sqlite3.Cursor, job_id: str) -> dict[str, str]:
    """Task id -> the message of its latest preemption event ("preempted by ..."), for one job."""
    out: dict[str, str] = {}
    for r in cur.execute(
        "SELECT task_id, message FROM events WHERE job_id = ? AND kind = 'task_preempted' ORDER BY id",
        (job_id,),
    ):
        out[r["task_id"]] = r["message"]
    return out
