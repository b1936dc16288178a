"""Reads and writes of the controller's tables: the only module that speaks SQL to ControllerDB.

Row types are plain dataclasses so the decision kernels never see a database cursor.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

from iris.cluster.controller.task_state import AttemptSnapshot, TaskSnapshot
from iris.rpc.enums import JobState, PriorityBand, StopReason, TaskState
from iris.rpc.models import JobSpec, ResourceSpec, WorkerHealth


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
    " root_submitted_at, started_at, finished_at, scheduling_deadline, error, exit_code, pending_reason"
)


def _job(row: sqlite3.Row) -> JobRow:
    return JobRow(
        job_id=row["job_id"],
        name=row["name"],
        user=row["user"],
        parent_job_id=row["parent_job_id"],
        root_job_id=row["root_job_id"],
        depth=row["depth"],
        state=JobState(row["state"]),
        priority=PriorityBand(row["priority"]),
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
    )


# ---------------------------------------------------------------- jobs


def insert_job(
    cur: sqlite3.Cursor,
    *,
    job_id: str,
    spec: JobSpec,
    user: str,
    parent_job_id: str | None,
    root_job_id: str,
    depth: int,
    now: float,
    root_submitted_at: float,
) -> None:
    res = spec.resources
    deadline = now + spec.scheduling_timeout_s if spec.scheduling_timeout_s else None
    cur.execute(
        "INSERT INTO jobs (job_id, name, user, parent_job_id, root_job_id, depth, state, priority, replicas,"
        " spec_json, submitted_at, root_submitted_at, scheduling_deadline, cpu_millicores, memory_bytes,"
        " disk_bytes, device_type, device_variant, device_count, group_by, timeout_s)"
        " VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
        (
            job_id,
            spec.name,
            user,
            parent_job_id,
            root_job_id,
            depth,
            JobState.PENDING.value,
            spec.priority.value,
            spec.replicas,
            spec.model_dump_json(),
            now,
            root_submitted_at,
            deadline,
            res.cpu_millicores,
            res.memory_bytes,
            res.disk_bytes,
            res.device.type if res.device else "",
            res.device.variant if res.device else "",
            res.device.count if res.device else 0,
            spec.coscheduling.group_by if spec.coscheduling else None,
            spec.timeout_s,
        ),
    )
    cur.executemany(
        "INSERT INTO tasks (task_id, job_id, task_index, state) VALUES (?,?,?,?)",
        [(f"{job_id}/{i}", job_id, i, TaskState.PENDING.value) for i in range(spec.replicas)],
    )


def delete_job_tree(cur: sqlite3.Cursor, job_id: str) -> None:
    """Remove a finished job and its descendants (used when a name is reused)."""
    like = job_id + "/%"
    cur.execute(
        "DELETE FROM attempts WHERE task_id IN (SELECT task_id FROM tasks WHERE job_id = ? OR job_id LIKE ?)",
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
) -> tuple[list[JobRow], int]:
    where, args = [], []
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


def update_job(cur: sqlite3.Cursor, job_id: str, **fields: object) -> None:
    cols = ", ".join(f"{k} = ?" for k in fields)
    cur.execute(f"UPDATE jobs SET {cols} WHERE job_id = ?", [*(_db(v) for v in fields.values()), job_id])


def task_state_counts(cur: sqlite3.Cursor, job_id: str) -> dict[TaskState, int]:
    return {
        TaskState(r[0]): r[1]
        for r in cur.execute("SELECT state, count(*) FROM tasks WHERE job_id = ? GROUP BY state", (job_id,))
    }


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


def tasks_of_job(
    cur: sqlite3.Cursor, job_id: str, *, offset: int = 0, limit: int | None = None
) -> list[sqlite3.Row]:
    """The job's tasks by index; ``offset``/``limit`` read one page of them."""
    return cur.execute(
        f"SELECT {_TASK_COLUMNS} FROM tasks t WHERE job_id = ? ORDER BY task_index LIMIT ? OFFSET ?",
        (job_id, -1 if limit is None else limit, offset),
    ).fetchall()


def get_task(cur: sqlite3.Cursor, task_id: str) -> sqlite3.Row | None:
    return cur.execute(f"SELECT {_TASK_COLUMNS} FROM tasks t WHERE task_id = ?", (task_id,)).fetchone()


def attempts_of_tasks(cur: sqlite3.Cursor, task_ids: Sequence[str]) -> dict[str, list[sqlite3.Row]]:
    out: dict[str, list[sqlite3.Row]] = {t: [] for t in task_ids}
    for row in select_in(
        cur,
        "SELECT a.*, w.address AS worker_address FROM attempts a LEFT JOIN workers w ON w.worker_id = a.worker_id"
        " WHERE a.task_id IN (:ids) ORDER BY a.attempt_number",
        task_ids,
    ):
        out[row["task_id"]].append(row)
    return out


def get_attempt(cur: sqlite3.Cursor, attempt_uid: str) -> sqlite3.Row | None:
    return cur.execute(
        "SELECT a.*, w.address AS worker_address FROM attempts a LEFT JOIN workers w ON w.worker_id = a.worker_id"
        " WHERE a.attempt_uid = ?",
        (attempt_uid,),
    ).fetchone()


def pending_tasks(cur: sqlite3.Cursor, limit: int = 100_000) -> list[sqlite3.Row]:
    return cur.execute(
        "SELECT t.task_id, t.job_id, t.task_index, t.current_attempt_uid, t.failure_count, t.preemption_count, t.pending_reason,"
        " j.user, j.priority, j.depth, j.root_submitted_at, j.submitted_at, j.group_by, j.replicas,"
        " j.cpu_millicores, j.memory_bytes, j.disk_bytes, j.device_type, j.device_variant, j.device_count, j.spec_json"
        " FROM tasks t JOIN jobs j ON j.job_id = t.job_id WHERE t.state = 'PENDING' LIMIT ?",
        (limit,),
    ).fetchall()


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
            state=TaskState(r[6]),
            stop_reason=StopReason(r[7]) if r[7] else None,
            task_state=TaskState(r[8]),
            current_attempt_uid=r[9],
        )
        for r in cur.execute(sql, args)
    ]


def worker_usage(cur: sqlite3.Cursor) -> list[sqlite3.Row]:
    """Per unreleased attempt: its worker, resources, band and whether it still runs."""
    return cur.execute(
        "SELECT a.worker_id, a.task_id, a.state, a.stop_reason, a.started_at, t.job_id, j.priority, j.group_by,"
        " j.cpu_millicores, j.memory_bytes, j.disk_bytes, j.device_type, j.device_variant, j.device_count"
        " FROM attempts a JOIN tasks t ON t.task_id = a.task_id JOIN jobs j ON j.job_id = t.job_id"
        " WHERE a.released = 0 AND a.worker_id IS NOT NULL"
    ).fetchall()


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
    for r in select_in(
        cur,
        "SELECT t.task_id, t.state, t.current_attempt_uid, t.failure_count, t.preemption_count, t.started_at,"
        " t.finished_at, t.exit_code, t.error, j.spec_json FROM tasks t JOIN jobs j ON j.job_id = t.job_id"
        " WHERE t.task_id IN (:ids)",
        task_ids,
    ):
        spec = json.loads(r["spec_json"])
        out[r["task_id"]] = TaskSnapshot(
            task_id=r["task_id"],
            state=TaskState(r["state"]),
            current_attempt_uid=r["current_attempt_uid"],
            failure_count=r["failure_count"],
            preemption_count=r["preemption_count"],
            max_retries_failure=spec.get("max_retries_failure", 0),
            max_retries_preemption=spec.get("max_retries_preemption", 100),
            started_at=r["started_at"],
            finished_at=r["finished_at"],
            exit_code=r["exit_code"],
            error=r["error"],
        )
    return out


def attempt_snapshots(cur: sqlite3.Cursor, attempt_uids: Iterable[str]) -> dict[str, AttemptSnapshot]:
    out: dict[str, AttemptSnapshot] = {}
    for r in select_in(
        cur,
        "SELECT attempt_uid, task_id, state, released, stop_reason, started_at, finished_at, exit_code, error"
        " FROM attempts WHERE attempt_uid IN (:ids)",
        attempt_uids,
    ):
        out[r[0]] = AttemptSnapshot(
            attempt_uid=r[0],
            task_id=r[1],
            state=TaskState(r[2]),
            released=bool(r[3]),
            stop_reason=StopReason(r[4]) if r[4] else None,
            started_at=r[5],
            finished_at=r[6],
            exit_code=r[7],
            error=r[8],
        )
    return out


def attempt_workers(cur: sqlite3.Cursor, attempt_uids: Sequence[str]) -> dict[str, str]:
    """The worker each attempt was placed on (attempts on Kubernetes have none)."""
    out: dict[str, str] = {}
    for r in select_in(
        cur,
        "SELECT attempt_uid, worker_id FROM attempts WHERE attempt_uid IN (:ids) AND worker_id IS NOT NULL",
        attempt_uids,
    ):
        out[r[0]] = r[1]
    return out


def write_task(cur: sqlite3.Cursor, task: TaskSnapshot, *, pending_reason: str | None = None) -> None:
    cur.execute(
        "UPDATE tasks SET state=?, current_attempt_uid=?, failure_count=?, preemption_count=?, started_at=?,"
        " finished_at=?, exit_code=?, error=?, pending_reason=? WHERE task_id=?",
        (
            task.state.value,
            task.current_attempt_uid,
            task.failure_count,
            task.preemption_count,
            task.started_at,
            task.finished_at,
            task.exit_code,
            task.error,
            pending_reason,
            task.task_id,
        ),
    )


def write_attempt(cur: sqlite3.Cursor, attempt: AttemptSnapshot, *, message: str | None = None) -> None:
    cur.execute(
        "UPDATE attempts SET state=?, released=?, stop_reason=?, started_at=?, finished_at=?, exit_code=?, error=?,"
        " message=COALESCE(?, message) WHERE attempt_uid=?",
        (
            attempt.state.value,
            int(attempt.released),
            attempt.stop_reason.value if attempt.stop_reason else None,
            attempt.started_at,
            attempt.finished_at,
            attempt.exit_code,
            attempt.error,
            message,
            attempt.attempt_uid,
        ),
    )


def insert_attempt(
    cur: sqlite3.Cursor,
    *,
    attempt_uid: str,
    task_id: str,
    attempt_number: int,
    worker_id: str | None,
    now: float,
    gang: tuple[int, int] | None = None,
) -> None:
    """A new attempt for a pending task; ``gang`` is (generation, size) for a gang member."""
    cur.execute(
        "INSERT INTO attempts (attempt_uid, task_id, attempt_number, worker_id, state, created_at, gang_generation, gang_size)"
        " VALUES (?,?,?,?,?,?,?,?)",
        (
            attempt_uid,
            task_id,
            attempt_number,
            worker_id,
            TaskState.ASSIGNED.value,
            now,
            *(gang or (None, None)),
        ),
    )
    cur.execute(
        "UPDATE tasks SET state='ASSIGNED', current_attempt_uid=?, worker_id=?, pending_reason=NULL WHERE task_id=?",
        (attempt_uid, worker_id, task_id),
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


def next_attempt_numbers(cur: sqlite3.Cursor, task_ids: Sequence[str]) -> dict[str, int]:
    out = dict.fromkeys(task_ids, 0)
    for r in select_in(
        cur,
        "SELECT task_id, max(attempt_number) FROM attempts WHERE task_id IN (:ids) GROUP BY task_id",
        task_ids,
    ):
        out[r[0]] = r[1] + 1
    return out


def set_pending_reasons(cur: sqlite3.Cursor, reasons: Iterable[tuple[str | None, str]]) -> None:
    cur.executemany("UPDATE tasks SET pending_reason = ? WHERE task_id = ? AND state = 'PENDING'", reasons)


def active_tasks_of_job(cur: sqlite3.Cursor, job_id: str) -> list[str]:
    return [
        r[0]
        for r in cur.execute(
            "SELECT task_id FROM tasks WHERE job_id = ? AND state IN ('PENDING','ASSIGNED','BUILDING','RUNNING')",
            (job_id,),
        )
    ]


def running_with_timeouts(cur: sqlite3.Cursor) -> list[sqlite3.Row]:
    return cur.execute(
        "SELECT t.task_id, t.started_at, j.timeout_s FROM tasks t JOIN jobs j ON j.job_id = t.job_id"
        " WHERE j.timeout_s IS NOT NULL AND t.state = 'RUNNING'"
    ).fetchall()


def expired_pending(cur: sqlite3.Cursor, now: float) -> list[sqlite3.Row]:
    return cur.execute(
        "SELECT t.task_id, t.job_id, t.pending_reason FROM tasks t JOIN jobs j ON j.job_id = t.job_id"
        " WHERE j.scheduling_deadline IS NOT NULL AND j.scheduling_deadline < ? AND t.state IN ('PENDING', 'ASSIGNED')"
        " AND j.started_at IS NULL",
        (now,),
    ).fetchall()


# ---------------------------------------------------------------- workers


def upsert_worker(
    cur: sqlite3.Cursor,
    *,
    worker_id: str,
    address: str,
    capacity: ResourceSpec,
    attributes: dict[str, str],
    slice_id: str | None,
    scale_group: str | None,
    now: float,
) -> None:
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


def delete_worker(cur: sqlite3.Cursor, worker_id: str) -> None:
    cur.execute("DELETE FROM workers WHERE worker_id = ?", (worker_id,))
    cur.execute("DELETE FROM worker_attributes WHERE worker_id = ?", (worker_id,))


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
) -> list[sqlite3.Row]:
    where, args = [], []
    if namespace:
        where.append("namespace = ?")
        args.append(namespace)
    if name:
        where.append("name = ?")
        args.append(name)
    clause = ("WHERE " + " AND ".join(where)) if where else ""
    return cur.execute(
        f"SELECT * FROM endpoints {clause} ORDER BY namespace, name LIMIT 1000", args
    ).fetchall()


def delete_endpoints_of_job(cur: sqlite3.Cursor, job_id: str) -> None:
    cur.execute("DELETE FROM endpoints WHERE job_id = ? OR job_id LIKE ?", (job_id, job_id + "/%"))


# ---------------------------------------------------------------- meta


def meta_value(cur: sqlite3.Cursor, key: str) -> str | None:
    row = cur.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
    return row[0] if row else None


def set_meta_value(cur: sqlite3.Cursor, key: str, value: str) -> None:
    cur.execute(
        "INSERT INTO meta (key, value) VALUES (?, ?) ON CONFLICT(key) DO UPDATE SET value = excluded.value",
        (key, value),
    )


# ---------------------------------------------------------------- events


def add_events(
    cur: sqlite3.Cursor,
    events: Sequence[tuple[float, str, str | None, str | None, str | None, str | None, str]],
) -> None:
    cur.executemany(
        "INSERT INTO events (ts, kind, job_id, task_id, attempt_uid, worker_id, message) VALUES (?,?,?,?,?,?,?)",
        events,
    )


def job_events(cur: sqlite3.Cursor, job_id: str, limit: int = 200) -> list[sqlite3.Row]:
    return cur.execute(
        "SELECT ts, kind, job_id, task_id, attempt_uid, worker_id, message FROM events WHERE job_id = ? ORDER BY id DESC LIMIT ?",
        (job_id, limit),
    ).fetchall()


def _db(value: object) -> object:
    if hasattr(value, "value") and not isinstance(value, int | float | str):
        return value.value  # enums
    return value


def select_in(cur: sqlite3.Cursor, sql: str, ids: Iterable[str], size: int = 500) -> Iterator[sqlite3.Row]:
    """Run ``sql`` over ``ids`` in chunks SQLite accepts; ``:ids`` in the SQL stands for the IN list."""
    items = list(ids)
    for i in range(0, len(items), size):
        chunk = items[i : i + size]
        yield from cur.execute(sql.replace(":ids", ",".join("?" * len(chunk))), chunk)


# ---------------------------------------------------------------- reads for the log store's API


def tasks_in_tree(cur: sqlite3.Cursor, job_id: str, *, include_children: bool) -> list[sqlite3.Row]:
    """task_id, job_id, state, current_attempt_uid of a job's tasks (and its sub-jobs' tasks)."""
    if include_children:
        return cur.execute(
            "SELECT task_id, job_id, state, current_attempt_uid FROM tasks"
            " WHERE job_id = ? OR (job_id > ? AND job_id < ?)",
            (job_id, job_id + "/", job_id + "0"),  # '0' sorts right after '/'
        ).fetchall()
    return cur.execute(
        "SELECT task_id, job_id, state, current_attempt_uid FROM tasks WHERE job_id = ?", (job_id,)
    ).fetchall()


def attempt_rows(cur: sqlite3.Cursor, attempt_uids: Iterable[str]) -> dict[str, sqlite3.Row]:
    return {
        r["attempt_uid"]: r
        for r in select_in(
            cur,
            "SELECT a.attempt_uid, a.task_id, a.state, a.finished_at, a.worker_id, w.address AS worker_address"
            " FROM attempts a LEFT JOIN workers w ON w.worker_id = a.worker_id WHERE a.attempt_uid IN (:ids)",
            attempt_uids,
        )
    }


def last_preemptors(cur: sqlite3.Cursor, job_id: str) -> dict[str, str]:
    """Task id -> the message of its latest preemption event ("preempted by ..."), for one job."""
    out: dict[str, str] = {}
    for r in cur.execute(
        "SELECT task_id, message FROM events WHERE job_id = ? AND kind = 'task_preempted' ORDER BY id",
        (job_id,),
    ):
        out[r["task_id"]] = r["message"]
    return out
