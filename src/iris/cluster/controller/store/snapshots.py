"""The frozen reads the pure kernels decide from: ``round_snapshot`` (one scheduling pass),
``observation_snapshot`` / ``worker_snapshot`` (folding reports), ``job_rollups`` / ``job_snapshots``
(settling jobs). The types they return live in ``controller/snapshots.py`` (no SQL)."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable
from collections.abc import Set as AbstractSet

from iris.cluster.controller.scheduler.model import Resources
from iris.cluster.controller.snapshots import (
    AttemptUsage,
    Fleet,
    JobRollup,
    JobSnapshot,
    ObservationSnapshot,
    PendingTask,
    RoundSnapshot,
)
from iris.cluster.controller.store.queries import (
    get_jobs,
    jobs_with_live_attempts,
    list_workers,
    unreleased_attempts,
)
from iris.cluster.controller.store.rows import (
    ATTEMPT_SNAPSHOT_COLUMNS,
    BAND,
    STOP_REASON,
    TASK_STATE,
    job_meta_of,
    retry_budgets_of,
    row_to_attempt_snapshot,
    row_to_resources,
    select_in,
)
from iris.cluster.controller.task_state import AttemptSnapshot, TaskSnapshot
from iris.rpc.enums import TERMINAL_JOB_STATES, PriorityBand, TaskState


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
            r[0], TASK_STATE[r[1]], r[2], r[3], r[4], budget[0], budget[1], r[5], r[6], r[7], r[8], r[10]
        )
    return out


def _budgets(cur: sqlite3.Cursor, job_id: str) -> tuple[int, int]:
    """The job's (max_retries_failure, max_retries_preemption)."""
    row = cur.execute("SELECT spec_json FROM jobs WHERE job_id = ?", (job_id,)).fetchone()
    return retry_budgets_of(row[0] if row is not None else "{}")


def attempt_snapshots(cur: sqlite3.Cursor, attempt_uids: Iterable[str]) -> dict[str, AttemptSnapshot]:
    out: dict[str, AttemptSnapshot] = {}
    for r in select_in(
        cur,
        f"SELECT {ATTEMPT_SNAPSHOT_COLUMNS} FROM attempts WHERE attempt_uid IN (:ids)",
        attempt_uids,
    ):
        out[r[0]] = row_to_attempt_snapshot(r)
    return out


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
    singles: list[sqlite3.Row] = []
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
    out: list[PendingTask] = []
    for r in rows:
        job = per_job.get(r[1])
        if job is None:
            job = per_job[r[1]] = (BAND[r[5]], Resources(r[10], r[11], r[12], r[13], r[14], r[15]))
        out.append(PendingTask(r[0], r[1], r[2], r[3], r[4], job[0], r[6], r[7], r[8], r[9], job[1], r[16]))
    return out


def worker_usage(cur: sqlite3.Cursor) -> list[AttemptUsage]:
    """Per unreleased attempt on a worker: its resources, band and whether it still runs."""
    return [
        AttemptUsage(
            worker_id=r["worker_id"],
            task_id=r["task_id"],
            job_id=r["job_id"],
            state=TASK_STATE[r["state"]],
            stop_reason=STOP_REASON[r["stop_reason"]],
            started_at=r["started_at"],
            priority=BAND[r["priority"]],
            group_by=r["group_by"],
            resources=row_to_resources(r),
            user=r["user"],
        )
        for r in cur.execute(
            "SELECT a.worker_id, a.task_id, a.state, a.stop_reason, a.started_at, t.job_id, j.user, j.priority, j.group_by,"
            " j.cpu_millicores, j.memory_bytes, j.disk_bytes, j.device_type, j.device_variant, j.device_count"
            " FROM attempts a JOIN tasks t ON t.task_id = a.task_id JOIN jobs j ON j.job_id = t.job_id"
            " WHERE a.released = 0 AND a.worker_id IS NOT NULL"
        )
    ]


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
    stopping = frozenset(jobs_with_live_attempts(cur, gang_jobs)) if gang_jobs else frozenset[str]()
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


def job_rollups(cur: sqlite3.Cursor, job_ids: Iterable[str]) -> list[JobRollup]:
    jobs = [j for j in get_jobs(cur, job_ids).values() if j.state not in TERMINAL_JOB_STATES]
    counts: dict[str, dict[TaskState, int]] = {j.job_id: {} for j in jobs}
    for r in select_in(
        cur,
        "SELECT job_id, state, n FROM job_task_counts WHERE job_id IN (:ids) AND n > 0",
        list(counts),
    ):
        counts[r[0]][TASK_STATE[r[1]]] = r[2]
    out: list[JobRollup] = []
    for j in jobs:
        max_failures, coscheduled = job_meta_of(j.spec_json)
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
        budgets[j.job_id] = retry_budgets_of(j.spec_json)
        meta[j.job_id] = job_meta_of(j.spec_json)
    for r in select_in(
        cur,
        "SELECT task_id, job_id, state, current_attempt_uid, failure_count, preemption_count, started_at,"
        " finished_at, exit_code, error, version FROM tasks WHERE job_id IN (:ids) ORDER BY job_id, task_index",
        list(by_job),
    ):
        budget = budgets[r[1]]
        by_job[r[1]].append(
            TaskSnapshot(
                r[0], TASK_STATE[r[2]], r[3], r[4], r[5], budget[0], budget[1], r[6], r[7], r[8], r[9], r[10]
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
