"""The guarded commit: every change to jobs, tasks, attempts and workers goes through ``commit``.

Each write is conditional on the version (tasks, attempts) or state (jobs) it was decided from; a
change one of whose guards no longer holds is dropped whole (``Verdict.STALE``), one naming an
unlisted task edge is refused (``Verdict.REFUSED``). The shape of the effects is in effects.py."""

from __future__ import annotations

import logging
import secrets
import sqlite3
from collections.abc import Mapping, Sequence

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
    Verdict,
)
from iris.cluster.controller.store.rows import JOB_STATE, TASK_STATE, select_in
from iris.cluster.controller.transitions import edge_allowed
from iris.rpc.enums import TERMINAL_JOB_STATES, JobState, TaskState
from iris.rpc.gang import pick_gang_port
from iris.rpc.models import RegisterRequest

log = logging.getLogger("iris.controller.store")


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


def live_gang_ports(cur: sqlite3.Cursor) -> set[int]:
    """The coordinator ports of the gangs some member of which has not been released yet (its
    process may still hold the port): a new gang gets none of them."""
    return {
        r[0]
        for r in cur.execute(
            "SELECT DISTINCT gang_port FROM attempts WHERE released = 0 AND gang_port IS NOT NULL"
        )
    }


def next_attempt_numbers(cur: sqlite3.Cursor, task_ids: Sequence[str]) -> dict[str, int]:
    out = dict.fromkeys(task_ids, 0)
    for r in select_in(
        cur,
        "SELECT task_id, max(attempt_number) FROM attempts WHERE task_id IN (:ids) GROUP BY task_id",
        task_ids,
    ):
        out[r[0]] = r[1] + 1
    return out


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
    if not effects.changes and not effects.notes:
        return applied
    task_ids: set[str] = set()
    attempt_uids: set[str] = set()
    job_ids: set[str] = set()
    worker_ids: set[str] = set()
    unchanged = read_at is not None and writes_so_far(cur) == read_at
    task_rows: dict[str, tuple[int, TaskState]] = {}
    attempt_rows: dict[str, tuple[int, str | None]] = {}
    for change in effects.changes:
        for w in change.writes:
            match w:
                case MoveTask(before=before):
                    task_ids.add(before.task_id)
                    if unchanged:
                        task_rows.setdefault(before.task_id, (before.version, before.state))
                case MoveAttempt(before=before):
                    attempt_uids.add(before.attempt_uid)
                    if unchanged:
                        attempt_rows.setdefault(before.attempt_uid, (before.version, before.worker_id))
                case Assign():
                    task_ids.add(w.task_id)
                    if unchanged:
                        task_rows.setdefault(w.task_id, (w.task_version, TaskState.PENDING))
                    if w.worker_id is not None:
                        worker_ids.add(w.worker_id)
                case SetJob():
                    job_ids.add(w.job_id)
                case InsertJob() | UpsertWorker() | DeleteWorker():
                    pass
    if not unchanged:
        task_rows = {
            r[0]: (r[1], TASK_STATE[r[2]])
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
        r[0]: JOB_STATE[r[1]]
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
    inserts: list[InsertJob] = []
    upserts: list[UpsertWorker] = []
    deletes: list[DeleteWorker] = []
    events: list[Event] = []
    for change in effects.changes:
        match _guards_hold(change, task_rows, attempt_rows, job_rows, live_workers):
            case Verdict.STALE:
                applied.dropped.append(change)
                continue
            case Verdict.REFUSED:
                applied.refused.append(change)
                continue
            case Verdict.APPLIED:
                pass
        assigns: list[Assign] = []
        for w in change.writes:
            match w:
                case MoveTask(before=before, after=after):
                    version, _ = task_rows[before.task_id]
                    task_rows[before.task_id] = (version + 1, after.state)
                    task_writes.append(w)
                    applied.jobs.add(before.task_id.rsplit("/", 1)[0])
                case MoveAttempt(before=before):
                    version, worker_id = attempt_rows[before.attempt_uid]
                    attempt_rows[before.attempt_uid] = (version + 1, worker_id)
                    attempt_writes.append(w)
                    if worker_id:
                        applied.workers.add(worker_id)
                case Assign():
                    version, _ = task_rows[w.task_id]
                    task_rows[w.task_id] = (version + 1, TaskState.ASSIGNED)
                    assigns.append(w)
                    applied.jobs.add(w.job_id)
                    if w.worker_id is not None:
                        applied.workers.add(w.worker_id)
                case SetJob():
                    job_rows[w.job_id] = w.state
                    job_writes.append(w)
                    if w.state in TERMINAL_JOB_STATES:
                        applied.finished_jobs.append(w.job_id)
                case InsertJob():
                    inserts.append(w)
                case UpsertWorker():
                    upserts.append(w)
                case DeleteWorker():
                    deletes.append(w)
        if assigns:
            assign_groups.append(assigns)
        events.extend(change.events)
        applied.changes.append(change)

    applied.fleet_changed = bool(upserts or deletes)
    # Inserts and registrations first (assignments may name them), deletions last.
    for w in inserts:
        if w.replaces is not None:
            delete_job_tree(cur, w.replaces)
        _insert_job(cur, w, now)
    for w in upserts:
        _upsert_worker(cur, w.worker_id, w.request, now)
    _write_assignments(cur, assign_groups, now, applied)
    _write_tasks(cur, task_writes)
    _write_attempts(cur, attempt_writes)
    _write_jobs(cur, job_writes)
    for w in deletes:
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
) -> Verdict:
    """APPLIED when every guard holds; STALE when a row moved on; REFUSED for an unlisted edge."""
    for w in change.writes:
        match w:
            case MoveTask():
                row = tasks.get(w.before.task_id)
                if row is None or row[0] != w.before.version:
                    return Verdict.STALE
                if not edge_allowed(w.before.state, w.after.state):
                    log.error(
                        "refused task %s: %s -> %s is not a listed transition",
                        w.before.task_id,
                        w.before.state,
                        w.after.state,
                    )
                    return Verdict.REFUSED
            case MoveAttempt():
                row = attempts.get(w.before.attempt_uid)
                if row is None or row[0] != w.before.version:
                    return Verdict.STALE
            case Assign():
                row = tasks.get(w.task_id)
                if row is None or row[0] != w.task_version or row[1] is not TaskState.PENDING:
                    return Verdict.STALE
                if w.worker_id is not None and w.worker_id not in live_workers:
                    return Verdict.STALE
            case SetJob():
                if jobs.get(w.job_id) is not w.before:
                    return Verdict.STALE
            case InsertJob() | UpsertWorker() | DeleteWorker():
                pass
    return Verdict.APPLIED


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
    held: set[int] = live_gang_ports(cur) if gang_jobs else set()
    rows: list[tuple[object, ...]] = []
    for group in groups:
        port: int | None = None
        if group[0].gang:
            port = pick_gang_port(group[0].job_id, generations[group[0].job_id], held)
            held.add(port)
        for a in group:
            gang = (generations[a.job_id], len(group), port) if a.gang else (None, None, None)
            uid = secrets.token_hex(8)
            rows.append(
                (uid, a.task_id, numbers[a.task_id], a.worker_id, TaskState.ASSIGNED.value, now, *gang)
            )
            applied.attempts[a.task_id] = (uid, numbers[a.task_id])
        if group[0].gang:
            generations[group[0].job_id] += 1
    cur.executemany(
        "INSERT INTO attempts (attempt_uid, task_id, attempt_number, worker_id, state, created_at,"
        " gang_generation, gang_size, gang_port) VALUES (?,?,?,?,?,?,?,?,?)",
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
