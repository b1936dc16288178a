"""What callable tasks returned: one row per task in ``task_results``, the latest attempt's.

A callable task's runner posts its pickled return value (or the traceback of what it raised)
before it exits; ``Job.result()`` reads them back once the job has ended. Only the result of a
task's *current* attempt counts (a retry's overwrites an earlier attempt's; a replaced run's
never shows, its attempts are not current). The payload is bounded by ``max_result_bytes``: 1 MiB,
less in a job of over 256 tasks (all its results together stay within 256 MiB).
"""

from __future__ import annotations

import base64
import binascii
import sqlite3
import time

from iris.cluster.controller import store
from iris.rpc.errors import FailedPrecondition, InvalidArgument
from iris.rpc.models import TaskResult
from iris.rpc.result_limits import max_result_bytes


def save(cur: sqlite3.Cursor, task_id: str, result: TaskResult) -> None:
    """Keep ``result`` for ``task_id`` if it comes from the task's current attempt."""
    task = store.get_task(cur, task_id)
    if task is None or task.current_attempt_uid != result.attempt_uid:
        raise FailedPrecondition(f"attempt {result.attempt_uid} is not the current attempt of task {task_id}")
    # One job's results together stay bounded (a job may have 100,000 tasks): each task its share.
    job = store.get_job(cur, task.job_id)
    tasks = job.replicas if job is not None else 1
    limit = max_result_bytes(tasks)
    payload = None
    if result.ok:
        try:
            payload = base64.b64decode(result.payload_b64 or "", validate=True)
        except (binascii.Error, ValueError):
            raise InvalidArgument("payload_b64 is not base64") from None
        if len(payload) > limit:
            raise InvalidArgument(
                f"the result is {len(payload)} bytes, over the {limit}-byte limit per task "
                f"(of a job of {tasks} tasks)"
            )
    traceback = result.traceback[-limit:] if result.traceback is not None else None
    cur.execute(
        "INSERT INTO task_results (task_id, attempt_uid, ok, payload, traceback, created_at)"
        " VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (task_id) DO UPDATE SET attempt_uid = excluded.attempt_uid,"
        " ok = excluded.ok, payload = excluded.payload, traceback = excluded.traceback,"
        " created_at = excluded.created_at",
        (task_id, result.attempt_uid, int(result.ok), payload, traceback, time.time()),
    )


def for_job(cur: sqlite3.Cursor, job_id: str) -> list[TaskResult]:
    """The results the job's tasks' current attempts posted, in task order (tasks without one
    are left out)."""
    rows = cur.execute(
        "SELECT t.task_index, r.attempt_uid, r.ok, r.payload, r.traceback FROM tasks t"
        " JOIN task_results r ON r.task_id = t.task_id AND r.attempt_uid = t.current_attempt_uid"
        " WHERE t.job_id = ? ORDER BY t.task_index",
        (job_id,),
    ).fetchall()
    return [
        TaskResult(
            task_index=r[0],
            attempt_uid=r[1],
            ok=bool(r[2]),
            payload_b64=base64.b64encode(r[3]).decode("ascii") if r[3] is not None else None,
            traceback=r[4],
        )
        for r in rows
    ]
