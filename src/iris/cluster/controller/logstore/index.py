"""The log store's own SQLite index: which attempts have logs, whose they are, how big and how old,
each attempt's usage, and the lines of every small log. Kept apart from the controller's database
so log traffic never waits on (or delays) the control loop's transactions.

``log_attempts`` has a row per attempt. While ``inline`` is 1 its log is kept here, in
``log_inline`` (one row per push that added lines: the attempt, its first line number, the lines
as stored JSON lines); the row and those lines change in one transaction, so the row is the
truth for an inline log. Once a log outgrows the store's inline bound it moves to its file
(``inline`` 0, its ``log_inline`` rows gone), and the file is the truth from then on. A store
written before inline logs (schema version 0) has ``inline`` 0 on every row: its logs are in
their files.
"""

from __future__ import annotations

import json
import sqlite3
import threading
from collections.abc import Generator, Iterable, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from iris.rpc.log_models import AttemptUsage

_SCHEMA = """
CREATE TABLE IF NOT EXISTS log_attempts (
    attempt_uid TEXT PRIMARY KEY,
    task_id TEXT NOT NULL,
    job_id TEXT NOT NULL,
    attempt_number INTEGER NOT NULL,
    lines INTEGER NOT NULL DEFAULT 0,
    bytes INTEGER NOT NULL DEFAULT 0,
    first_ts REAL,
    last_ts REAL,
    final INTEGER NOT NULL DEFAULT 0,
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS log_attempts_job ON log_attempts(job_id);
CREATE INDEX IF NOT EXISTS log_attempts_task ON log_attempts(task_id, attempt_number);
CREATE INDEX IF NOT EXISTS log_attempts_age ON log_attempts(updated_at);
CREATE TABLE IF NOT EXISTS attempt_usage (
    attempt_uid TEXT PRIMARY KEY,
    usage_json TEXT NOT NULL,
    updated_at REAL NOT NULL
);
"""

# MIGRATIONS[k] takes the index from schema version k to k + 1 (``PRAGMA user_version``); the
# schema above is version 0, the only one before there were migrations.
MIGRATIONS: tuple[tuple[str, ...], ...] = (
    (
        # Existing rows keep 0: their logs are in files. New rows are written with 1.
        "ALTER TABLE log_attempts ADD COLUMN inline INTEGER NOT NULL DEFAULT 0",
        "CREATE TABLE log_inline ("
        " attempt_uid TEXT NOT NULL,"
        " first_line INTEGER NOT NULL,"
        " data BLOB NOT NULL,"
        " PRIMARY KEY (attempt_uid, first_line)"
        ") WITHOUT ROWID",
    ),
)
SCHEMA_VERSION = len(MIGRATIONS)


@dataclass(frozen=True, slots=True)
class AttemptLog:
    attempt_uid: str
    task_id: str
    job_id: str
    attempt_number: int
    lines: int
    bytes: int
    first_ts: float | None
    last_ts: float | None
    final: bool
    updated_at: float
    # The log's lines are in the index (``log_inline``), not in a file.
    inline: bool = False

    @property
    def task_index(self) -> int:
        tail = self.task_id.rsplit("/", 1)[-1]
        return int(tail) if tail.isdigit() else 0


def new_attempt_log(attempt_uid: str, task_id: str, attempt_number: int, now: float) -> AttemptLog:
    """The index row of an attempt whose log has no line yet (kept inline until it outgrows that)."""
    job_id = task_id.rsplit("/", 1)[0]
    return AttemptLog(attempt_uid, task_id, job_id, attempt_number, 0, 0, None, None, False, now, True)


@dataclass(slots=True)
class IndexWrites:
    """What one push changes in the index, applied in one transaction.

    ``adds``: new rows, written whole; ``updates``: existing rows' new sizes, ends, ``final`` and
    ``inline``; ``appends``: lines added to inline logs (attempt, first line number, data);
    ``spills``: inline logs now in their files, whose inline lines go; ``usages``: usage reports.
    """

    adds: dict[str, AttemptLog] = field(default_factory=dict[str, AttemptLog])
    updates: dict[str, AttemptLog] = field(default_factory=dict[str, AttemptLog])
    appends: list[tuple[str, int, bytes]] = field(default_factory=list[tuple[str, int, bytes]])
    spills: list[str] = field(default_factory=list[str])
    usages: list[tuple[str, AttemptUsage]] = field(default_factory=list[tuple[str, AttemptUsage]])
    now: float = 0.0

    @property
    def empty(self) -> bool:
        return not (self.adds or self.updates or self.appends or self.spills or self.usages)


def _row(r: sqlite3.Row) -> AttemptLog:
    return AttemptLog(
        r["attempt_uid"],
        r["task_id"],
        r["job_id"],
        r["attempt_number"],
        r["lines"],
        r["bytes"],
        r["first_ts"],
        r["last_ts"],
        bool(r["final"]),
        r["updated_at"],
        bool(r["inline"]),
    )


class LogIndex:
    def __init__(self, path: Path | str) -> None:
        self._conn = sqlite3.connect(str(path), check_same_thread=False, isolation_level=None)
        self._conn.row_factory = sqlite3.Row
        self._lock = threading.Lock()
        with self._lock:
            self._conn.execute("PRAGMA journal_mode=WAL")
            self._conn.execute("PRAGMA synchronous=NORMAL")
            self._conn.executescript(_SCHEMA)
            self._migrate()

    def _migrate(self) -> None:
        version = int(self._conn.execute("PRAGMA user_version").fetchone()[0])
        for number, statements in enumerate(MIGRATIONS[version:], start=version + 1):
            with self._transaction("BEGIN IMMEDIATE"):
                for statement in statements:
                    self._conn.execute(statement)
                self._conn.execute(f"PRAGMA user_version={number}")

    @contextmanager
    def _transaction(self, begin: str = "BEGIN") -> Generator[None, None, None]:
        """One transaction on the connection (its lock held by the caller): all of it or none."""
        self._conn.execute(begin)
        try:
            yield
            self._conn.execute("COMMIT")
        except BaseException:
            if self._conn.in_transaction:  # SQLite may have rolled back a failed COMMIT itself
                self._conn.execute("ROLLBACK")
            raise

    def schema_version(self) -> int:
        with self._lock:
            return int(self._conn.execute("PRAGMA user_version").fetchone()[0])

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    def get(self, attempt_uid: str) -> AttemptLog | None:
        with self._lock:
            r = self._conn.execute(
                "SELECT * FROM log_attempts WHERE attempt_uid = ?", (attempt_uid,)
            ).fetchone()
        return _row(r) if r is not None else None

    def get_many(self, attempt_uids: Sequence[str]) -> dict[str, AttemptLog]:
        """The rows of these attempts that exist."""
        out: dict[str, AttemptLog] = {}
        with self._lock:
            for i in range(0, len(attempt_uids), 500):
                chunk = list(attempt_uids[i : i + 500])
                marks = ",".join("?" * len(chunk))
                for r in self._conn.execute(
                    f"SELECT * FROM log_attempts WHERE attempt_uid IN ({marks})", chunk
                ).fetchall():
                    out[r["attempt_uid"]] = _row(r)
        return out

    def inline_log(self, attempt_uid: str) -> bytes | None:
        """An inline log's lines as stored now (``b""`` for an attempt without a row, whose log has
        no line); None when the log is in its file."""
        return self.inline_logs([attempt_uid])[attempt_uid]

    def inline_logs(self, attempt_uids: Sequence[str]) -> dict[str, bytes | None]:
        """``inline_log`` of many attempts, each read whole at one moment."""
        found: dict[str, list[bytes] | None] = {}
        with self._lock:  # the connection's lock: no push commits between these reads
            for i in range(0, len(attempt_uids), 500):
                chunk = list(attempt_uids[i : i + 500])
                marks = ",".join("?" * len(chunk))
                for uid, inline, data in self._conn.execute(
                    "SELECT a.attempt_uid, a.inline, c.data FROM log_attempts a"
                    " LEFT JOIN log_inline c ON c.attempt_uid = a.attempt_uid"
                    f" WHERE a.attempt_uid IN ({marks}) ORDER BY a.attempt_uid, c.first_line",
                    chunk,
                ):
                    if not inline:
                        found[uid] = None
                    elif data is not None:
                        pieces = found.setdefault(uid, [])
                        assert pieces is not None
                        pieces.append(data)
                    else:
                        found.setdefault(uid, [])
        out: dict[str, bytes | None] = {}
        for uid in attempt_uids:
            pieces = found.get(uid, [])
            out[uid] = None if pieces is None else b"".join(pieces)
        return out

    def write(self, writes: IndexWrites) -> None:
        """Apply one push's changes in one transaction (a commit per statement cost more than the push)."""
        if writes.empty:
            return
        with self._lock, self._transaction():
            self._conn.executemany(
                "INSERT INTO log_attempts (attempt_uid, task_id, job_id, attempt_number, lines, bytes,"
                " first_ts, last_ts, final, created_at, updated_at, inline)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [
                    (
                        a.attempt_uid,
                        a.task_id,
                        a.job_id,
                        a.attempt_number,
                        a.lines,
                        a.bytes,
                        a.first_ts,
                        a.last_ts,
                        int(a.final),
                        a.updated_at,
                        a.updated_at,
                        int(a.inline),
                    )
                    for a in writes.adds.values()
                ],
            )
            self._conn.executemany(
                "INSERT INTO log_inline (attempt_uid, first_line, data) VALUES (?, ?, ?)", writes.appends
            )
            self._conn.executemany(
                "DELETE FROM log_inline WHERE attempt_uid = ?", [(uid,) for uid in writes.spills]
            )
            self._conn.executemany(
                "UPDATE log_attempts SET lines = ?, bytes = ?, first_ts = ?, last_ts = ?,"
                " final = MAX(final, ?), updated_at = ?, inline = ? WHERE attempt_uid = ?",
                [
                    (
                        a.lines,
                        a.bytes,
                        a.first_ts,
                        a.last_ts,
                        int(a.final),
                        a.updated_at,
                        int(a.inline),
                        a.attempt_uid,
                    )
                    for a in writes.updates.values()
                ],
            )
            self._conn.executemany(
                "INSERT INTO attempt_usage (attempt_uid, usage_json, updated_at) VALUES (?, ?, ?)"
                " ON CONFLICT(attempt_uid) DO UPDATE SET usage_json = excluded.usage_json,"
                " updated_at = excluded.updated_at",
                [(uid, usage.model_dump_json(), writes.now) for uid, usage in writes.usages],
            )

    def of_tasks(self, task_ids: Sequence[str]) -> list[AttemptLog]:
        out: list[AttemptLog] = []
        with self._lock:
            for i in range(0, len(task_ids), 500):
                chunk = list(task_ids[i : i + 500])
                marks = ",".join("?" * len(chunk))
                out.extend(
                    _row(r)
                    for r in self._conn.execute(
                        f"SELECT * FROM log_attempts WHERE task_id IN ({marks})", chunk
                    ).fetchall()
                )
        return out

    def of_job(self, job_id: str, *, include_children: bool) -> list[AttemptLog]:
        with self._lock:
            if include_children:
                rows = self._conn.execute(
                    "SELECT * FROM log_attempts WHERE job_id = ? OR (job_id > ? AND job_id < ?)",
                    (job_id, job_id + "/", job_id + "0"),  # '0' sorts right after '/'
                ).fetchall()
            else:
                rows = self._conn.execute("SELECT * FROM log_attempts WHERE job_id = ?", (job_id,)).fetchall()
        return [_row(r) for r in rows]

    def job_bytes(self, job_id: str) -> int:
        """Bytes of log stored for the attempts of one job (its own, not its sub-jobs')."""
        with self._lock:
            row = self._conn.execute(
                "SELECT COALESCE(SUM(bytes), 0) FROM log_attempts WHERE job_id = ?", (job_id,)
            ).fetchone()
        return int(row[0])

    def total_bytes(self) -> int:
        with self._lock:
            return int(self._conn.execute("SELECT COALESCE(SUM(bytes), 0) FROM log_attempts").fetchone()[0])

    def oldest(self, limit: int = 500) -> list[AttemptLog]:
        with self._lock:
            rows = self._conn.execute(
                "SELECT * FROM log_attempts ORDER BY updated_at LIMIT ?", (limit,)
            ).fetchall()
        return [_row(r) for r in rows]

    def older_than(self, cutoff: float, limit: int = 500) -> list[AttemptLog]:
        with self._lock:
            rows = self._conn.execute(
                "SELECT * FROM log_attempts WHERE updated_at < ? ORDER BY updated_at LIMIT ?", (cutoff, limit)
            ).fetchall()
        return [_row(r) for r in rows]

    def remove(self, attempt_uids: Iterable[str]) -> None:
        """Forget these attempts: rows, inline lines and usage, in one transaction."""
        uids = [(u,) for u in attempt_uids]
        with self._lock, self._transaction():
            self._conn.executemany("DELETE FROM log_attempts WHERE attempt_uid = ?", uids)
            self._conn.executemany("DELETE FROM log_inline WHERE attempt_uid = ?", uids)
            self._conn.executemany("DELETE FROM attempt_usage WHERE attempt_uid = ?", uids)

    def usage_of(self, attempt_uids: Sequence[str]) -> dict[str, AttemptUsage]:
        out: dict[str, AttemptUsage] = {}
        with self._lock:
            for i in range(0, len(attempt_uids), 500):
                chunk = list(attempt_uids[i : i + 500])
                marks = ",".join("?" * len(chunk))
                for r in self._conn.execute(
                    f"SELECT attempt_uid, usage_json FROM attempt_usage WHERE attempt_uid IN ({marks})", chunk
                ).fetchall():
                    out[r["attempt_uid"]] = AttemptUsage.model_validate(json.loads(r["usage_json"]))
        return out
