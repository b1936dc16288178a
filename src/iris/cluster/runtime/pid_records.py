"""Pid records of running attempts, so a restarted worker (or its watchdog) can kill what is left.

All records live in one append-only journal, ``<state>/pids/journal``, one line per event:

    + <attempt_uid> <pgid> <start_ticks> <boot_id> [<task_uid> [c]]
                                                       the attempt's process group started (as
                                                       its own uid, when the worker isolates;
                                                       ``c``: it is the launcher of a container,
                                                       which the engine keeps running without it)
    - <attempt_uid>                                    its process tree is gone (released)

An attempt is recorded while its last line is a ``+``. The start time (clock ticks since boot,
plus the boot id) identifies the group leader: a leader pid that now belongs to another process
has a different start time and is left alone. A line is written with one ``write`` on an
``O_APPEND`` descriptor the runtime keeps open, so a start costs a few microseconds of CPU where
a file per attempt cost a file creation and an unlink (each dear on ext4). A reader ignores a
torn last line (a crash in the middle of a write). When the journal has grown well past what is
live, the runtime rewrites it with only the live records and renames that over it.

Pid records of older versions (``<state>/pids/<uid>.json``, a file per attempt) are still read,
so a worker upgraded in place kills what its previous version left running.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import threading
from dataclasses import dataclass
from pathlib import Path

from iris.cluster.runtime.proc_table import (
    ProcInfo,
    boot_id,
    process_tree,
    read_environ,
    scan_process_table,
    uid_processes,
)

logger = logging.getLogger(__name__)

JOURNAL = "journal"
# Rewrite the journal once it holds this many lines and four times as many as are live.
COMPACT_AFTER_LINES = 4096


@dataclass(frozen=True, slots=True)
class PidRecord:
    attempt_uid: str
    pgid: int
    start_ticks: int
    boot_id: str
    # The uid the attempt runs as (a root worker's per-attempt uid), or -1: every process of that
    # uid is the attempt's, whatever it did to its group, session or environment.
    task_uid: int = -1
    # The recorded process only launches (or follows) a container: the task runs in the engine's
    # container, which survives the worker daemon (a restarted worker adopts it).
    container: bool = False


def _start_line(record: PidRecord) -> bytes:
    # Attempt uids are plain names and the boot id a UUID: no spaces or newlines in a field.
    line = f"+ {record.attempt_uid} {record.pgid} {record.start_ticks} {record.boot_id or '-'}"
    if record.container:
        line += f" {record.task_uid} c"
    elif record.task_uid >= 0:
        line += f" {record.task_uid}"
    return (line + "\n").encode()


class PidJournal:
    """The runtime's side: appends start and end lines, compacts. Thread-safe.

    Opening it starts a new journal: the caller has dealt with what an earlier run recorded
    (``kill_leftover_trees``) before.
    """

    def __init__(self, pids_dir: Path, compact_after_lines: int = COMPACT_AFTER_LINES) -> None:
        self.path = Path(pids_dir) / JOURNAL
        self._compact_after = compact_after_lines
        self._lock = threading.Lock()
        self._live: dict[str, PidRecord] = {}
        self._lines = 0
        for legacy in Path(pids_dir).glob("*.json"):
            legacy.unlink(missing_ok=True)
        Path(pids_dir, JOURNAL + ".tmp").unlink(missing_ok=True)  # a compaction cut short
        self._fd = self._open(truncate=True)

    def _open(self, *, truncate: bool) -> int:
        flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC | (os.O_TRUNC if truncate else 0)
        return os.open(self.path, flags, 0o600)

    def started(self, record: PidRecord) -> None:
        with self._lock:
            os.write(self._fd, _start_line(record))
            self._live[record.attempt_uid] = record
            self._lines += 1

    def ended(self, attempt_uid: str) -> None:
        """The attempt's tree is gone; nothing is written for an attempt never recorded."""
        with self._lock:
            if self._live.pop(attempt_uid, None) is None:
                return
            try:
                os.write(self._fd, f"- {attempt_uid}\n".encode())
            except OSError as exc:  # a full disk: the record stays, its leader's start time protects
                logger.warning("could not record the end of attempt %s: %s", attempt_uid, exc)
                return
            self._lines += 1
            if self._lines >= self._compact_after and self._lines >= 4 * len(self._live):
                self._compact_locked()

    def live(self) -> list[PidRecord]:
        with self._lock:
            return list(self._live.values())

    def _compact_locked(self) -> None:
        """Rewrite with the live records only, then rename over the journal (never a moment without one)."""
        tmp = self.path.with_name(JOURNAL + ".tmp")
        data = b"".join(_start_line(record) for record in self._live.values())
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
            try:
                os.write(fd, data)
            finally:
                os.close(fd)
            os.replace(tmp, self.path)
        except OSError as exc:  # e.g. a full disk: keep appending to the long journal
            logger.warning("could not compact the pid journal %s: %s", self.path, exc)
            self._lines = len(self._live)  # try again only after as many lines again
            return
        old, self._fd = self._fd, self._open(truncate=False)
        os.close(old)
        self._lines = len(self._live)

    def close(self) -> None:
        with self._lock:
            if self._fd >= 0:
                os.close(self._fd)
                self._fd = -1


def parse_journal(data: bytes) -> dict[str, PidRecord]:
    """The live records of a journal's content; a torn or unreadable line is skipped."""
    live: dict[str, PidRecord] = {}
    lines = data.split(b"\n")
    for raw in lines[:-1]:  # the last piece has no newline: empty, or torn by a crash
        fields = raw.decode(errors="replace").split(" ")
        try:
            if fields[0] == "+" and len(fields) in (5, 6, 7):
                boot = "" if fields[4] == "-" else fields[4]
                task_uid = int(fields[5]) if len(fields) >= 6 else -1
                if len(fields) == 7 and fields[6] != "c":
                    raise ValueError(raw)
                live[fields[1]] = PidRecord(
                    fields[1], int(fields[2]), int(fields[3]), boot, task_uid, container=len(fields) == 7
                )
            elif fields[0] == "-" and len(fields) == 2:
                live.pop(fields[1], None)
            else:
                raise ValueError(raw)
        except ValueError:
            logger.warning("ignoring an unreadable pid journal line: %r", raw[:200])
    return live


def load_pid_records(pids_dir: Path) -> list[PidRecord]:
    """Every attempt recorded as running: the journal's, and any older version's record files."""
    try:
        with open(Path(pids_dir) / JOURNAL, "rb") as f:
            live = parse_journal(f.read())
    except FileNotFoundError:
        live = {}
    for path in Path(pids_dir).glob("*.json"):
        try:
            data = json.loads(path.read_text())
            record = PidRecord(
                str(data["attempt_uid"]), int(data["pgid"]), int(data["start_ticks"]), str(data["boot_id"])
            )
        except (OSError, ValueError, KeyError, TypeError):
            logger.warning("ignoring unreadable pid record %s", path)
            continue
        live.setdefault(record.attempt_uid, record)
    return list(live.values())


def kill_leftover_trees(pids_dir: Path, worker_id: str, records: list[PidRecord] | None = None) -> list[str]:
    """SIGKILL every recorded process tree that still runs; returns the recorded attempt uids.

    A tree is found three ways: from its recorded group leader (only if the leader's start time
    matches the record); every process of the attempt's own task uid (a root worker's attempts:
    found however they detached or cleared their environment); and by scanning for processes
    whose environment names one of the recorded attempts AND this worker (unisolated attempts
    whose processes left the group or outlived their leader). Only reads the records (``records``, or all of ``pids_dir``'s): the runtime starts
    a new journal after calling it, and the watchdog never writes to the daemon's.
    """
    if records is None:
        records = load_pid_records(pids_dir)
    if not records:
        return []
    current_boot = boot_id()
    table = scan_process_table()
    me = os.getpid()
    targets = _recorded_trees(records, table, current_boot)
    uids = {record.attempt_uid for record in records}
    # A per-attempt task uid names every process of the attempt, however it detached.
    task_uids = {r.task_uid for r in records if r.task_uid >= 0 and r.boot_id == current_boot}
    targets |= set(uid_processes(task_uids, exclude=me))
    for pid in table:
        if pid == me or pid in targets:
            continue
        env = read_environ(pid)
        if env.get("IRIS_ATTEMPT_UID") in uids and env.get("IRIS_WORKER_ID") == worker_id:
            targets.add(pid)
    targets.discard(me)
    _kill_all(targets)
    if targets:
        logger.warning(
            "killed %d leftover processes of %d attempts from a previous run", len(targets), len(records)
        )
    return sorted(uids)


def kill_launchers(records: list[PidRecord]) -> list[str]:
    """SIGKILL the recorded launcher trees of container attempts (the ``docker run`` CLI or the
    follower of an adopted container), found only from their recorded group leader: the
    containers' own processes (children of the engine, with the attempt's environment and uid)
    are left running, for a restarted worker to adopt. Returns the attempt uids."""
    if not records:
        return []
    targets = _recorded_trees(records, scan_process_table(), boot_id())
    targets.discard(os.getpid())
    _kill_all(targets)
    return sorted(record.attempt_uid for record in records)


def _recorded_trees(records: list[PidRecord], table: dict[int, ProcInfo], current_boot: str) -> set[int]:
    """The processes of every recorded tree whose group leader still runs (same boot, same start
    time: not a newer process that got the recycled pid)."""
    targets: set[int] = set()
    for record in records:
        leader = table.get(record.pgid)
        if record.boot_id == current_boot and leader is not None and leader.start_ticks == record.start_ticks:
            targets |= process_tree(table, record.pgid, record.pgid)
    return targets


def _kill_all(pids: set[int]) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
