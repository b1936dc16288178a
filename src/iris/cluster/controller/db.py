"""ControllerDB: the controller's SQLite store (WAL mode, versioned migrations).

Only the controller process touches this file. All access goes through one connection guarded
by a lock: the control loop and the API threads take turns, and every multi-row change is one
transaction (``with db.transaction() as cur: ...``). What must follow a write (telling the
pending queue, waking waiters, dropping cached specs) is registered inside the transaction with
``db.after_commit(callback)`` and runs only once COMMIT has succeeded, never after a rollback.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Generator
from contextlib import contextmanager
from pathlib import Path

from iris.rpc.errors import InsufficientStorage

log = logging.getLogger("iris.controller.db")
MIN_FREE_BYTES = 16 * 1024 * 1024  # (or a tenth of a smaller disk) before a full one counts as recovered

MIGRATIONS: list[str] = [
    # 1: jobs, tasks, attempts, the worker store and events
    """
    CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
    CREATE TABLE jobs (
        job_id TEXT PRIMARY KEY,
        name TEXT NOT NULL,
        user TEXT NOT NULL,
        parent_job_id TEXT,
        root_job_id TEXT NOT NULL,
        depth INTEGER NOT NULL,
        state TEXT NOT NULL,
        priority TEXT NOT NULL,
        replicas INTEGER NOT NULL,
        spec_json TEXT NOT NULL,
        submitted_at REAL NOT NULL,
        root_submitted_at REAL NOT NULL,
        started_at REAL,
        finished_at REAL,
        scheduling_deadline REAL,
        error TEXT,
        exit_code INTEGER,
        failed_attempts INTEGER NOT NULL DEFAULT 0,
        pending_reason TEXT,
        cpu_millicores INTEGER NOT NULL DEFAULT 0,
        memory_bytes INTEGER NOT NULL DEFAULT 0,
        disk_bytes INTEGER NOT NULL DEFAULT 0,
        device_type TEXT NOT NULL DEFAULT '',
        device_variant TEXT NOT NULL DEFAULT '',
        device_count INTEGER NOT NULL DEFAULT 0,
        group_by TEXT,
        timeout_s REAL
    );
    CREATE INDEX jobs_state ON jobs(state);
    CREATE INDEX jobs_parent ON jobs(parent_job_id);
    CREATE INDEX jobs_submitted ON jobs(submitted_at);
    CREATE INDEX jobs_user ON jobs(user);
    CREATE TABLE tasks (
        task_id TEXT PRIMARY KEY,
        job_id TEXT NOT NULL,
        task_index INTEGER NOT NULL,
        state TEXT NOT NULL,
        current_attempt_uid TEXT,
        worker_id TEXT,
        failure_count INTEGER NOT NULL DEFAULT 0,
        preemption_count INTEGER NOT NULL DEFAULT 0,
        exit_code INTEGER,
        error TEXT,
        pending_reason TEXT,
        started_at REAL,
        finished_at REAL
    );
    CREATE INDEX tasks_job ON tasks(job_id, task_index);
    CREATE INDEX tasks_state ON tasks(state);
    CREATE TABLE attempts (
        attempt_uid TEXT PRIMARY KEY,
        task_id TEXT NOT NULL,
        attempt_number INTEGER NOT NULL,
        worker_id TEXT,
        state TEXT NOT NULL,
        stop_reason TEXT,
        released INTEGER NOT NULL DEFAULT 0,
        created_at REAL NOT NULL,
        started_at REAL,
        finished_at REAL,
        exit_code INTEGER,
        error TEXT,
        message TEXT
    );
    CREATE INDEX attempts_task ON attempts(task_id, attempt_number);
    CREATE INDEX attempts_live ON attempts(worker_id) WHERE released = 0;
    CREATE TABLE workers (
        worker_id TEXT PRIMARY KEY,
        address TEXT NOT NULL,
        capacity_json TEXT NOT NULL,
        slice_id TEXT,
        scale_group TEXT,
        registered_at REAL NOT NULL,
        last_contact_at REAL,
        active INTEGER NOT NULL DEFAULT 1,
        health_json TEXT
    );
    CREATE TABLE worker_attributes (
        worker_id TEXT NOT NULL,
        key TEXT NOT NULL,
        value TEXT NOT NULL,
        PRIMARY KEY (worker_id, key)
    );
    CREATE TABLE events (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        ts REAL NOT NULL,
        kind TEXT NOT NULL,
        job_id TEXT,
        task_id TEXT,
        attempt_uid TEXT,
        worker_id TEXT,
        message TEXT NOT NULL
    );
    CREATE INDEX events_job ON events(job_id, id);
    """,
    # 2: named endpoints registered by running tasks, isolated per root-job namespace
    """
    CREATE TABLE endpoints (
        namespace TEXT NOT NULL,
        name TEXT NOT NULL,
        address TEXT NOT NULL,
        job_id TEXT NOT NULL,
        task_id TEXT,
        metadata_json TEXT NOT NULL DEFAULT '{}',
        registered_at REAL NOT NULL,
        PRIMARY KEY (namespace, name)
    );
    CREATE INDEX endpoints_job ON endpoints(job_id);
    """,
    # 3: the jobs list filtered by state stays an index walk
    """
    CREATE INDEX jobs_state_submitted ON jobs(state, submitted_at);
    """,
    # 4: the members of a gang dispatched together share a generation (one Kueue pod group)
    """
    ALTER TABLE attempts ADD COLUMN gang_generation INTEGER;
    ALTER TABLE attempts ADD COLUMN gang_size INTEGER;
    """,
    # 5: list pages and counts stay index walks with 100,000s of jobs: covering indexes for the
    # jobs list's orders and filters, and task/job counts by state (overall and per job) kept by
    # triggers, so the dashboard's chips, /metrics and a job's counts read a few small rows
    """
    DROP INDEX jobs_submitted;
    CREATE INDEX jobs_submitted ON jobs(submitted_at, job_id);
    DROP INDEX jobs_parent;
    CREATE INDEX jobs_parent ON jobs(parent_job_id, submitted_at, job_id);
    DROP INDEX jobs_user;
    CREATE INDEX jobs_user ON jobs(user, state, submitted_at, job_id);
    CREATE TABLE state_counts (
        kind TEXT NOT NULL,
        state TEXT NOT NULL,
        n INTEGER NOT NULL,
        PRIMARY KEY (kind, state)
    ) WITHOUT ROWID;
    CREATE TABLE job_task_counts (
        job_id TEXT NOT NULL,
        state TEXT NOT NULL,
        n INTEGER NOT NULL,
        PRIMARY KEY (job_id, state)
    ) WITHOUT ROWID;
    INSERT INTO state_counts SELECT 'job', state, count(*) FROM jobs GROUP BY state;
    INSERT INTO state_counts SELECT 'task', state, count(*) FROM tasks GROUP BY state;
    INSERT INTO job_task_counts SELECT job_id, state, count(*) FROM tasks GROUP BY job_id, state;
    CREATE TRIGGER jobs_counted AFTER INSERT ON jobs BEGIN
        INSERT INTO state_counts VALUES ('job', new.state, 1)
            ON CONFLICT (kind, state) DO UPDATE SET n = n + 1;
    END;
    CREATE TRIGGER jobs_uncounted AFTER DELETE ON jobs BEGIN
        UPDATE state_counts SET n = n - 1 WHERE kind = 'job' AND state = old.state;
        DELETE FROM job_task_counts WHERE job_id = old.job_id;
    END;
    CREATE TRIGGER jobs_recounted AFTER UPDATE OF state ON jobs WHEN old.state IS NOT new.state BEGIN
        UPDATE state_counts SET n = n - 1 WHERE kind = 'job' AND state = old.state;
        INSERT INTO state_counts VALUES ('job', new.state, 1)
            ON CONFLICT (kind, state) DO UPDATE SET n = n + 1;
    END;
    CREATE TRIGGER tasks_counted AFTER INSERT ON tasks BEGIN
        INSERT INTO state_counts VALUES ('task', new.state, 1)
            ON CONFLICT (kind, state) DO UPDATE SET n = n + 1;
        INSERT INTO job_task_counts VALUES (new.job_id, new.state, 1)
            ON CONFLICT (job_id, state) DO UPDATE SET n = n + 1;
    END;
    CREATE TRIGGER tasks_uncounted AFTER DELETE ON tasks BEGIN
        UPDATE state_counts SET n = n - 1 WHERE kind = 'task' AND state = old.state;
        UPDATE job_task_counts SET n = n - 1 WHERE job_id = old.job_id AND state = old.state;
    END;
    CREATE TRIGGER tasks_recounted AFTER UPDATE OF state ON tasks WHEN old.state IS NOT new.state BEGIN
        UPDATE state_counts SET n = n - 1 WHERE kind = 'task' AND state = old.state;
        INSERT INTO state_counts VALUES ('task', new.state, 1)
            ON CONFLICT (kind, state) DO UPDATE SET n = n + 1;
        UPDATE job_task_counts SET n = n - 1 WHERE job_id = old.job_id AND state = old.state;
        INSERT INTO job_task_counts VALUES (new.job_id, new.state, 1)
            ON CONFLICT (job_id, state) DO UPDATE SET n = n + 1;
    END;
    """,
    # 6: every task and attempt write is guarded by the version it was decided from
    """
    ALTER TABLE tasks ADD COLUMN version INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE attempts ADD COLUMN version INTEGER NOT NULL DEFAULT 0;
    """,
    # 7: the deadline scans (every 0.25 s) start from the few live jobs that have a deadline, not
    # from every PENDING task (100 ms a scan with 200,000 of them)
    """
    CREATE INDEX jobs_live_with_timeout ON jobs(job_id)
        WHERE timeout_s IS NOT NULL AND state IN ('PENDING', 'RUNNING');
    CREATE INDEX jobs_unstarted_with_deadline ON jobs(scheduling_deadline)
        WHERE scheduling_deadline IS NOT NULL AND started_at IS NULL AND state IN ('PENDING', 'RUNNING');
    """,
    # 8: root jobs counted by state too: the dashboard's jobs page (roots only) had its total
    # counted by walking every root job (6 ms at 100,000)
    """
    INSERT INTO state_counts SELECT 'root_job', state, count(*) FROM jobs WHERE parent_job_id IS NULL GROUP BY state;
    CREATE TRIGGER root_jobs_counted AFTER INSERT ON jobs WHEN new.parent_job_id IS NULL BEGIN
        INSERT INTO state_counts VALUES ('root_job', new.state, 1)
            ON CONFLICT (kind, state) DO UPDATE SET n = n + 1;
    END;
    CREATE TRIGGER root_jobs_uncounted AFTER DELETE ON jobs WHEN old.parent_job_id IS NULL BEGIN
        UPDATE state_counts SET n = n - 1 WHERE kind = 'root_job' AND state = old.state;
    END;
    CREATE TRIGGER root_jobs_recounted AFTER UPDATE OF state ON jobs
        WHEN old.state IS NOT new.state AND new.parent_job_id IS NULL BEGIN
        UPDATE state_counts SET n = n - 1 WHERE kind = 'root_job' AND state = old.state;
        INSERT INTO state_counts VALUES ('root_job', new.state, 1)
            ON CONFLICT (kind, state) DO UPDATE SET n = n + 1;
    END;
    """,
    # 9: a job row names its run: a job token carries it, so a replaced run's tokens are refused
    """
    ALTER TABLE jobs ADD COLUMN run_uid TEXT NOT NULL DEFAULT '';
    """,
    # 10: who uploaded each bundle: a user reads, checks for and submits with their own bundles only
    """
    CREATE TABLE bundle_owners (
        bundle_id TEXT NOT NULL,
        user TEXT NOT NULL,
        PRIMARY KEY (bundle_id, user)
    ) WITHOUT ROWID;
    """,
    # 11: cordoned and draining workers (controller/cordons.py), kept across re-registration
    """
    CREATE TABLE worker_cordons (
        worker_id TEXT PRIMARY KEY,
        mode TEXT NOT NULL,
        reason TEXT NOT NULL,
        since REAL NOT NULL,
        automatic INTEGER NOT NULL DEFAULT 0
    );
    """,
    # 12: per-user budgets (``iris user budget set``), the scheduler's first gate
    """
    CREATE TABLE user_budgets (
        user TEXT PRIMARY KEY,
        budget_json TEXT NOT NULL,
        updated_at REAL NOT NULL
    ) WITHOUT ROWID;
    """,
    # 13: a gang's coordinator port, chosen when the gang is assigned (guarded_commit.py): stored
    # with each member's attempt, so every member is told the same one and no two live gangs share it
    """
    ALTER TABLE attempts ADD COLUMN gang_port INTEGER;
    """,
]


def statements(script: str) -> list[str]:
    """A migration's statements; a trigger's body (with its own semicolons) stays one statement."""
    out: list[str] = []
    pending = ""
    for piece in script.split(";"):
        pending += piece + ";"
        if pending.strip(" \n;") and sqlite3.complete_statement(pending):
            out.append(pending.strip())
            pending = ""
    if pending.strip(" \n;"):
        out.append(pending.strip())
    return out


# Kept outside MIGRATIONS: created if missing at every open (an older database gains it as is).
OWN_TABLES = [
    # What each callable task's latest attempt returned or raised (results.py): one row per task.
    """CREATE TABLE IF NOT EXISTS task_results (
        task_id TEXT PRIMARY KEY,
        attempt_uid TEXT NOT NULL,
        ok INTEGER NOT NULL,
        payload BLOB,
        traceback TEXT,
        created_at REAL NOT NULL
    )""",
]


class ControllerDB:
    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)
        if str(path) != ":memory:":
            self.path.parent.mkdir(parents=True, exist_ok=True)
        self._conn = sqlite3.connect(str(path), check_same_thread=False, isolation_level=None)
        self._conn.row_factory = sqlite3.Row
        self._lock = threading.RLock()
        self.disk_full_since: float | None = None  # set while writes fail for lack of space
        self._after_commit: list[Callable[[], None]] = []  # the open transaction's callbacks
        self._tx_thread: int | None = None  # the thread whose transaction is open
        self.transactions = 0  # write transactions begun: the open one's number while it is open
        self._conn.execute("PRAGMA journal_mode=WAL")
        self._conn.execute("PRAGMA synchronous=NORMAL")
        self._conn.execute("PRAGMA foreign_keys=OFF")
        self._conn.execute("PRAGMA cache_size=-65536")
        self._migrate()
        with self._lock:
            for statement in OWN_TABLES:
                self._conn.execute(statement)

    @property
    def connection(self) -> sqlite3.Connection:
        """The raw connection, for modules that own their own tables (the autoscaler store)."""
        return self._conn

    @property
    def lock(self) -> threading.RLock:
        return self._lock

    def schema_version(self) -> int:
        with self._lock:
            return int(self._conn.execute("PRAGMA user_version").fetchone()[0])

    def _migrate(self) -> None:
        with self._lock:
            version = int(self._conn.execute("PRAGMA user_version").fetchone()[0])
            for number, script in enumerate(MIGRATIONS, start=1):
                if number <= version:
                    continue
                self._conn.execute("BEGIN IMMEDIATE")
                try:
                    for statement in statements(script):
                        self._conn.execute(statement)
                    self._conn.execute(f"PRAGMA user_version={number}")
                    self._conn.execute("COMMIT")
                except BaseException:
                    self._conn.execute("ROLLBACK")
                    raise

    @contextmanager
    def transaction(self) -> Generator[sqlite3.Cursor, None, None]:
        """A write transaction; a full disk rolls it back and raises ``InsufficientStorage``."""
        with self._lock:
            if self._tx_thread is not None:
                raise RuntimeError("ControllerDB.transaction() does not nest")
            cur = self._conn.cursor()
            try:
                cur.execute("BEGIN IMMEDIATE")
                self.transactions += 1
                self._tx_thread = threading.get_ident()
                try:
                    yield cur
                    cur.execute("COMMIT")
                except BaseException:
                    if self._conn.in_transaction:  # SQLite may have rolled back a failed COMMIT itself
                        cur.execute("ROLLBACK")
                    raise
                finally:
                    self._tx_thread = None
                    callbacks, self._after_commit = self._after_commit, []
                # committed: only now may the rest of the process hear of it
                for callback in callbacks:
                    try:
                        callback()
                    except Exception:  # the write stands; one failed callback must not hide the others
                        log.exception("a post-commit callback failed")
            except sqlite3.Error as exc:
                if not _disk_full(exc):
                    raise
                if self.disk_full_since is None:
                    self.disk_full_since = time.time()
                raise InsufficientStorage(
                    f"the controller's state disk is full ({self.path.parent}): nothing was written; free space there"
                ) from None

    def after_commit(self, callback: Callable[[], None]) -> None:
        """Run ``callback`` once the open transaction (this thread's) commits; never if it rolls back."""
        if self._tx_thread != threading.get_ident():
            raise RuntimeError("after_commit() needs an open transaction on this thread")
        self._after_commit.append(callback)

    def probe_write(self) -> bool:
        """After a full disk: is there room again (some free space and a write that commits)?

        Clears the mark when there is; a rolled-back write frees a little room, so one small
        write fitting is not enough on its own."""
        if self.disk_full_since is None:
            return True
        fs = os.statvfs(self.path.parent)
        if fs.f_bavail * fs.f_frsize < min(MIN_FREE_BYTES, fs.f_blocks * fs.f_frsize // 10):
            return False
        try:
            with self.transaction() as cur:
                cur.execute(
                    "INSERT OR REPLACE INTO meta (key, value) VALUES ('write_probe', ?)", (str(time.time()),)
                )
        except InsufficientStorage:
            return False
        self.disk_full_since = None
        return True

    @contextmanager
    def read(self) -> Generator[sqlite3.Cursor, None, None]:
        with self._lock:
            yield self._conn.cursor()

    def size_bytes(self) -> int:
        total = 0
        for suffix in ("", "-wal", "-shm"):
            p = Path(str(self.path) + suffix)
            if p.exists():
                total += p.stat().st_size
        return total

    def close(self) -> None:
        with self._lock:
            self._conn.close()


def _disk_full(exc: sqlite3.Error) -> bool:
    return getattr(exc, "sqlite_errorcode", None) == sqlite3.SQLITE_FULL or "disk is full" in str(exc)
