"""The autoscaler's own tables in the controller's SQLite database.

``autoscaler_slices`` (slices it tracks), ``autoscaler_groups`` (backoff, slice sequence, recent
creates) and ``autoscaler_actions`` (the action log, trimmed to the newest ``max_actions``). Every
write is one savepoint, so it commits on its own in autocommit mode and nests inside a caller's
transaction otherwise.
"""

from __future__ import annotations

import json
import sqlite3
import threading
from collections.abc import Generator, Iterable
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass

from iris.cluster.controller.autoscaler.model import ActionKind, BackoffState, ScaleAction
from iris.cluster.platforms.base import SliceState

_SCHEMA = [
    """CREATE TABLE IF NOT EXISTS autoscaler_slices (
        slice_id TEXT PRIMARY KEY,
        scale_group TEXT NOT NULL,
        state TEXT NOT NULL,
        created_at REAL NOT NULL,
        ready_at REAL,
        idle_since REAL,
        worker_ids TEXT NOT NULL,
        addresses TEXT NOT NULL,
        error TEXT,
        terminating INTEGER NOT NULL DEFAULT 0
    )""",
    """CREATE TABLE IF NOT EXISTS autoscaler_groups (
        name TEXT PRIMARY KEY,
        next_seq INTEGER NOT NULL,
        backoff TEXT NOT NULL,
        recent_creates TEXT NOT NULL
    )""",
    """CREATE TABLE IF NOT EXISTS autoscaler_actions (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        ts REAL NOT NULL,
        scale_group TEXT NOT NULL,
        action TEXT NOT NULL,
        slice_id TEXT,
        reason TEXT NOT NULL
    )""",
]


@dataclass
class SliceRecord:
    """A slice the autoscaler tracks (mutable: the shell updates it every evaluation)."""

    slice_id: str
    group: str
    state: SliceState
    created_at: float
    ready_at: float | None = None
    idle_since: float | None = None
    worker_ids: tuple[str, ...] = ()
    addresses: tuple[str, ...] = ()
    error: str | None = None
    terminating: bool = False
    """Termination was asked for but failed; retried every evaluation, hidden from the planner."""


@dataclass(frozen=True)
class GroupRecord:
    next_seq: int = 1
    backoff: BackoffState = BackoffState()
    recent_creates: tuple[float, ...] = ()


class AutoscalerStore:
    """Persistence over a connection the controller owns; pass its lock if other threads share it."""

    def __init__(
        self, conn: sqlite3.Connection, lock: threading.RLock | None = None, max_actions: int = 1000
    ) -> None:
        self._conn = conn
        self._lock: AbstractContextManager[object] = lock if lock is not None else nullcontext()
        self._max_actions = max_actions
        with self._write() as cur:
            for statement in _SCHEMA:
                cur.execute(statement)

    @contextmanager
    def _write(self) -> Generator[sqlite3.Cursor, None, None]:
        with self._lock:
            cur = self._conn.cursor()
            cur.execute("SAVEPOINT autoscaler")
            try:
                yield cur
            except BaseException:
                cur.execute("ROLLBACK TO autoscaler")
                cur.execute("RELEASE autoscaler")
                raise
            else:
                cur.execute("RELEASE autoscaler")

    # ------------------------------------------------------------ reads

    def load_slices(self) -> list[SliceRecord]:
        with self._lock:
            rows = self._conn.execute(
                "SELECT slice_id, scale_group, state, created_at, ready_at, idle_since, worker_ids, addresses,"
                " error, terminating FROM autoscaler_slices ORDER BY created_at, slice_id"
            ).fetchall()
        return [
            SliceRecord(
                slice_id=r[0],
                group=r[1],
                state=SliceState(r[2]),
                created_at=r[3],
                ready_at=r[4],
                idle_since=r[5],
                worker_ids=tuple(json.loads(r[6])),
                addresses=tuple(json.loads(r[7])),
                error=r[8],
                terminating=bool(r[9]),
            )
            for r in rows
        ]

    def load_groups(self) -> dict[str, GroupRecord]:
        with self._lock:
            rows = self._conn.execute(
                "SELECT name, next_seq, backoff, recent_creates FROM autoscaler_groups"
            ).fetchall()
        groups: dict[str, GroupRecord] = {}
        for name, next_seq, backoff, recent in rows:
            b = json.loads(backoff)
            groups[name] = GroupRecord(
                next_seq=next_seq,
                backoff=BackoffState(
                    failure_times=tuple(b["failure_times"]),
                    level=b["level"],
                    until=b["until"],
                    reason=b["reason"],
                    last_success=b["last_success"],
                ),
                recent_creates=tuple(json.loads(recent)),
            )
        return groups

    def recent_actions(self, limit: int = 100) -> list[ScaleAction]:
        """Newest last."""
        with self._lock:
            rows = self._conn.execute(
                "SELECT ts, scale_group, action, slice_id, reason FROM autoscaler_actions ORDER BY id DESC LIMIT ?",
                (limit,),
            ).fetchall()
        return [ScaleAction(r[0], r[1], ActionKind(r[2]), r[3], r[4]) for r in reversed(rows)]

    # ------------------------------------------------------------ writes

    def save(
        self,
        slices: Iterable[SliceRecord],
        removed: Iterable[str],
        groups: dict[str, GroupRecord],
        actions: Iterable[ScaleAction],
    ) -> None:
        """Write one evaluation's outcome in one savepoint."""
        with self._write() as cur:
            cur.executemany(
                "INSERT OR REPLACE INTO autoscaler_slices (slice_id, scale_group, state, created_at, ready_at,"
                " idle_since, worker_ids, addresses, error, terminating) VALUES (?,?,?,?,?,?,?,?,?,?)",
                [
                    (
                        s.slice_id,
                        s.group,
                        s.state.value,
                        s.created_at,
                        s.ready_at,
                        s.idle_since,
                        json.dumps(list(s.worker_ids)),
                        json.dumps(list(s.addresses)),
                        s.error,
                        int(s.terminating),
                    )
                    for s in slices
                ],
            )
            cur.executemany("DELETE FROM autoscaler_slices WHERE slice_id = ?", [(sid,) for sid in removed])
            cur.executemany(
                "INSERT OR REPLACE INTO autoscaler_groups (name, next_seq, backoff, recent_creates) VALUES (?,?,?,?)",
                [
                    (
                        name,
                        g.next_seq,
                        json.dumps(_backoff_json(g.backoff)),
                        json.dumps(list(g.recent_creates)),
                    )
                    for name, g in groups.items()
                ],
            )
            rows = [(a.ts, a.group, a.action.value, a.slice_id, a.reason) for a in actions]
            if rows:
                cur.executemany(
                    "INSERT INTO autoscaler_actions (ts, scale_group, action, slice_id, reason) VALUES (?,?,?,?,?)",
                    rows,
                )
                cur.execute(
                    "DELETE FROM autoscaler_actions WHERE id <= (SELECT MAX(id) FROM autoscaler_actions) - ?",
                    (self._max_actions,),
                )


def _backoff_json(b: BackoffState) -> dict[str, object]:
    return {
        "failure_times": list(b.failure_times),
        "level": b.level,
        "until": b.until,
        "reason": b.reason,
        "last_success": b.last_success,
    }
