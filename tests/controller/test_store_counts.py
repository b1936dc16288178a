"""State counts kept by triggers agree with counting the rows, through inserts, moves and deletes."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from iris.cluster.controller import store
from iris.cluster.controller.db import MIGRATIONS, ControllerDB, statements
from iris.cluster.controller.effects import Change, Effects, InsertJob
from iris.rpc.models import Entrypoint, JobSpec, ResourceSpec


def add_job(cur: sqlite3.Cursor, name: str, replicas: int, parent: str | None = None) -> str:
    spec = JobSpec(
        name=name,
        entrypoint=Entrypoint.from_command("true"),
        replicas=replicas,
        resources=ResourceSpec(cpu=1),
    )
    job_id = f"{parent}/{name}" if parent else f"/u/{name}"
    insert = InsertJob(
        job_id=job_id,
        spec=spec,
        user="u",
        parent_job_id=parent,
        root_job_id=parent or job_id,
        depth=2 if parent else 1,
        root_submitted_at=1.0,
    )
    store.commit(cur, Effects(changes=(Change((insert,)),)), 1.0)
    return job_id


def counted(cur: sqlite3.Cursor, sql: str) -> dict[str, int]:
    return {r[0]: r[1] for r in cur.execute(sql)}


def check(cur: sqlite3.Cursor, job_ids: list[str]) -> None:
    assert store.job_counts(cur) == counted(cur, "SELECT state, count(*) FROM jobs GROUP BY state")
    assert store.task_counts(cur) == counted(cur, "SELECT state, count(*) FROM tasks GROUP BY state")
    per_job = store.task_counts_for_jobs(cur, job_ids)
    for job_id in job_ids:
        rows = counted(cur, f"SELECT state, count(*) FROM tasks WHERE job_id = '{job_id}' GROUP BY state")
        assert per_job[job_id] == rows
    # A list page's total, where the counts answer it, is what counting the rows says.
    for states in ((), ("PENDING",), ("SUCCEEDED", "RUNNING"), ("FAILED",)):
        chosen = f"state IN ({','.join(repr(s) for s in states)})" if states else "1"
        for roots in (False, True):
            rooted = " AND parent_job_id IS NULL" if roots else ""
            rows = cur.execute(f"SELECT count(*) FROM jobs WHERE {chosen}{rooted}").fetchone()[0]
            assert store.list_jobs(cur, states=states, roots_only=roots, limit=1)[1] == rows


def test_counts_follow_every_write(tmp_path: Path) -> None:
    db = ControllerDB(tmp_path / "c.sqlite3")
    with db.transaction() as cur:
        a, b = add_job(cur, "a", 5), add_job(cur, "b", 3)
        child = add_job(cur, "child", 1, parent=b)
        check(cur, [a, b])
        cur.execute("UPDATE jobs SET state = 'RUNNING' WHERE job_id IN (?, ?)", (a, child))
        check(cur, [a, b, child])
        cur.execute("UPDATE tasks SET state = 'RUNNING' WHERE job_id = ? AND task_index < 2", (a,))
        cur.execute("UPDATE tasks SET state = 'RUNNING' WHERE job_id = ? AND task_index < 2", (a,))  # no move
        cur.execute("UPDATE tasks SET state = 'SUCCEEDED' WHERE job_id = ?", (b,))
        cur.execute("UPDATE jobs SET state = 'SUCCEEDED' WHERE job_id = ?", (b,))
        cur.execute("UPDATE tasks SET pending_reason = 'x' WHERE job_id = ?", (a,))  # not a state write
        check(cur, [a, b])
        assert store.task_counts_for_jobs(cur, [a])[a] == {"PENDING": 3, "RUNNING": 2}
        store.delete_job_tree(cur, b)
        check(cur, [a, b])
        assert store.task_counts_for_jobs(cur, [b])[b] == {}
        assert "SUCCEEDED" not in store.job_counts(cur)


def test_counts_start_from_the_rows_already_stored(tmp_path: Path) -> None:
    """A database from before the counts (schema 4) gets them filled in by the migration."""
    path = tmp_path / "old.sqlite3"
    conn = sqlite3.connect(path, isolation_level=None)
    for script in MIGRATIONS[:4]:
        for statement in statements(script):
            conn.execute(statement)
    conn.execute("PRAGMA user_version=4")
    conn.execute(
        "INSERT INTO jobs (job_id, name, user, root_job_id, depth, state, priority, replicas, spec_json,"
        " submitted_at, root_submitted_at) VALUES ('/u/old', 'old', 'u', '/u/old', 1, 'RUNNING', 'BATCH', 2, '{}', 1, 1)"
    )
    conn.execute(
        "INSERT INTO tasks (task_id, job_id, task_index, state) VALUES ('/u/old/0', '/u/old', 0, 'RUNNING')"
    )
    conn.execute(
        "INSERT INTO tasks (task_id, job_id, task_index, state) VALUES ('/u/old/1', '/u/old', 1, 'PENDING')"
    )
    conn.close()
    db = ControllerDB(path)
    with db.read() as cur:
        assert store.job_counts(cur) == {"RUNNING": 1}
        assert store.task_counts(cur) == {"RUNNING": 1, "PENDING": 1}
        assert store.task_counts_for_jobs(cur, ["/u/old"]) == {"/u/old": {"RUNNING": 1, "PENDING": 1}}
        assert store.list_jobs(cur, roots_only=True, states=["RUNNING"])[1] == 1


def test_a_trigger_body_stays_one_statement() -> None:
    script = "CREATE TABLE t (x);\nCREATE TRIGGER g AFTER INSERT ON t BEGIN\n  SELECT 1;\n  SELECT 2;\nEND;\n"
    assert [s.split()[1] for s in statements(script)] == ["TABLE", "TRIGGER"]
