"""Reads (and the few small writes) the API, the CLI views and the controller's commands make:
jobs, tasks, attempts, workers, endpoints, bundles, events, meta."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable, Sequence
from functools import lru_cache

from iris.cluster.controller.snapshots import (
    JobRow,
    LiveAttempt,
    WorkerRow,
)
from iris.cluster.controller.store.rows import (
    ATTEMPT_ROW_SQL,
    BAND,
    JOB_COLUMNS,
    STOP_REASON,
    TASK_COLUMNS,
    TASK_STATE,
    AttemptRow,
    EventRow,
    TaskRow,
    WaitingTask,
    row_to_attempt,
    row_to_job,
    row_to_task,
    select_in,
)
from iris.rpc.enums import TERMINAL_JOB_STATES, JobState
from iris.rpc.gang import gang_port
from iris.rpc.models import EndpointInfo, ResourceSpec, WorkerHealth


def job_tree(cur: sqlite3.Cursor, job_id: str) -> list[str]:
    """The job and all its descendants."""
    return [
        r[0]
        for r in cur.execute(
            "SELECT job_id FROM jobs WHERE job_id = ? OR job_id LIKE ?", (job_id, job_id + "/%")
        )
    ]


def get_job(cur: sqlite3.Cursor, job_id: str) -> JobRow | None:
    row = cur.execute(f"SELECT {JOB_COLUMNS} FROM jobs WHERE job_id = ?", (job_id,)).fetchone()
    return row_to_job(row) if row else None


def get_jobs(cur: sqlite3.Cursor, job_ids: Iterable[str]) -> dict[str, JobRow]:
    ids = list(job_ids)
    out: dict[str, JobRow] = {}
    for row in select_in(cur, f"SELECT {JOB_COLUMNS} FROM jobs WHERE job_id IN (:ids)", ids):
        out[row["job_id"]] = row_to_job(row)
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
    where: list[str] = []
    args: list[object] = []
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
        f"SELECT {JOB_COLUMNS} FROM jobs WHERE rowid IN"
        f" (SELECT rowid FROM jobs {clause} {ordering} LIMIT ? OFFSET ?) {ordering}",
        [*args, limit, offset],
    ).fetchall()
    return [row_to_job(r) for r in rows], total


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


def tasks_of_job(
    cur: sqlite3.Cursor, job_id: str, *, offset: int = 0, limit: int | None = None
) -> list[TaskRow]:
    """The job's tasks by index; ``offset``/``limit`` read one page of them."""
    return [
        row_to_task(r)
        for r in cur.execute(
            f"SELECT {TASK_COLUMNS} FROM tasks t WHERE job_id = ? ORDER BY task_index LIMIT ? OFFSET ?",
            (job_id, -1 if limit is None else limit, offset),
        )
    ]


def get_task(cur: sqlite3.Cursor, task_id: str) -> TaskRow | None:
    row = cur.execute(f"SELECT {TASK_COLUMNS} FROM tasks t WHERE task_id = ?", (task_id,)).fetchone()
    return row_to_task(row) if row is not None else None


def attempts_of_tasks(cur: sqlite3.Cursor, task_ids: Sequence[str]) -> dict[str, list[AttemptRow]]:
    out: dict[str, list[AttemptRow]] = {t: [] for t in task_ids}
    for row in select_in(
        cur, ATTEMPT_ROW_SQL + " WHERE a.task_id IN (:ids) ORDER BY a.attempt_number", task_ids
    ):
        attempt = row_to_attempt(row)
        out[attempt.task_id].append(attempt)
    return out


def get_attempt(cur: sqlite3.Cursor, attempt_uid: str) -> AttemptRow | None:
    """One attempt with its worker's address (None once the worker is gone)."""
    row = cur.execute(ATTEMPT_ROW_SQL + " WHERE a.attempt_uid = ?", (attempt_uid,)).fetchone()
    return row_to_attempt(row) if row is not None else None


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
            state=TASK_STATE[r[6]],
            stop_reason=STOP_REASON[r[7]],
            task_state=TASK_STATE[r[8]],
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
) -> dict[tuple[str, int], tuple[str, int]]:
    """(job id, gang generation) -> the address of the worker running that generation's task 0 and
    the gang's coordinator port (chosen at assignment; derived for a gang assigned before that)."""
    out: dict[tuple[str, int], tuple[str, int]] = {}
    for job_id, generation in set(gangs):
        row = cur.execute(
            "SELECT w.address, a.gang_port FROM tasks t JOIN attempts a ON a.task_id = t.task_id"
            " JOIN workers w ON w.worker_id = a.worker_id"
            " WHERE t.job_id = ? AND t.task_index = 0 AND a.gang_generation = ? LIMIT 1",
            (job_id, generation),
        ).fetchone()
        if row is not None:
            out[(job_id, generation)] = (
                row[0],
                row[1] if row[1] is not None else gang_port(job_id, generation),
            )
    return out


def waiting_tasks(cur: sqlite3.Cursor, limit: int, *, user: str | None = None) -> list[WaitingTask]:
    """Tasks not yet running that carry a pending reason, oldest job first (the scheduler view);
    ``user``: that user's only."""
    mine = " AND j.user = ?" if user is not None else ""
    return [
        WaitingTask(r[0], r[1], r[2], r[3], BAND[r[4]], r[5])
        for r in cur.execute(
            "SELECT t.task_id, t.job_id, t.pending_reason, j.user, j.priority, j.submitted_at FROM tasks t"
            " JOIN jobs j ON j.job_id = t.job_id WHERE t.state IN ('PENDING', 'ASSIGNED') AND t.pending_reason IS NOT NULL"
            f"{mine} ORDER BY j.submitted_at LIMIT ?",
            (limit,) if user is None else (user, limit),
        )
    ]


@lru_cache(maxsize=8192)
def _capacity(text: str) -> ResourceSpec:
    """A worker's stored capacity, parsed once per distinct text: every round lists every worker,
    and a capacity rarely changes. Shared between callers, so never mutated (nothing does)."""
    return ResourceSpec.model_validate_json(text)


def list_workers(cur: sqlite3.Cursor) -> list[WorkerRow]:
    attrs: dict[str, dict[str, str]] = {}
    for r in cur.execute("SELECT worker_id, key, value FROM worker_attributes"):
        attrs.setdefault(r[0], {})[r[1]] = r[2]
    return [
        WorkerRow(
            worker_id=r["worker_id"],
            address=r["address"],
            capacity=_capacity(r["capacity_json"]),
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
    where: list[str] = []
    args: list[object] = []
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


def meta_value(cur: sqlite3.Cursor, key: str) -> str | None:
    row = cur.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
    return row[0] if row else None


def set_meta_value(cur: sqlite3.Cursor, key: str, value: str) -> None:
    cur.execute(
        "INSERT INTO meta (key, value) VALUES (?, ?) ON CONFLICT(key) DO UPDATE SET value = excluded.value",
        (key, value),
    )


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


def tasks_in_tree(cur: sqlite3.Cursor, job_id: str, *, include_children: bool) -> list[TaskRow]:
    """A job's tasks (and, with ``include_children``, its sub-jobs' tasks)."""
    if include_children:
        rows = cur.execute(
            f"SELECT {TASK_COLUMNS} FROM tasks t WHERE job_id = ? OR (job_id > ? AND job_id < ?)",
            (job_id, job_id + "/", job_id + "0"),  # '0' sorts right after '/'
        )
    else:
        rows = cur.execute(f"SELECT {TASK_COLUMNS} FROM tasks t WHERE job_id = ?", (job_id,))
    return [row_to_task(r) for r in rows]


def attempt_rows(cur: sqlite3.Cursor, attempt_uids: Iterable[str]) -> dict[str, AttemptRow]:
    rows = select_in(cur, ATTEMPT_ROW_SQL + " WHERE a.attempt_uid IN (:ids)", attempt_uids)
    return {attempt.attempt_uid: attempt for attempt in map(row_to_attempt, rows)}


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
