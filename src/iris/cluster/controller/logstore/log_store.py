"""The controller's log store: every attempt's log lines, kept under the state dir after the machine
that produced them is gone.

Workers push lines numbered from 0 per attempt; the store keeps what continues what it has and
answers how many lines it holds, so a sender that lost its place (a restart on either side)
simply resends from there. Nothing here runs on the control loop's thread.

Layout under the store's root:

- ``index.sqlite3``: a row per attempt (owner, size, age, ``final``), usage reports, and the lines
  of every small log, inline (see index.py). Most attempts log a few lines; creating a file for
  each was most of what storing them cost.
- ``<uid[:2]>/<uid>.jsonl`` (and ``.idx`` past ``STRIDE`` lines): the log of an attempt that
  outgrew the inline bound (``inline_max_bytes`` or ``inline_max_lines``), and of every attempt
  stored before logs were kept inline (see segment.py).

A log moves to its file once, in the push that would take it past the bound: that push writes
the file whole (the inline lines, then its own) and flips the row to "in its file", deleting the
inline lines, in the push's one index transaction. A crash before that transaction leaves the
row inline and a file nobody reads; the next spill of that log rewrites it from scratch, and
retention deletes it with the row. Files are not fsynced (nor is the index per commit): after a
power loss the store holds a consistent prefix of each log, and workers resend the rest.

One push (or retention drop) changes the store at a time; readers run beside them and see each
log as of a committed push: an inline log's lines and size come from one read of the index, a
file's from its segment, which never shows a half-appended line.
"""

from __future__ import annotations

import dataclasses
import errno
import json
import logging
import re
import shutil
import sqlite3
import tempfile
import threading
import time
import weakref
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from itertools import islice
from pathlib import Path

from iris.cluster.controller.disk_full import note_disk_full
from iris.cluster.controller.logstore.index import AttemptLog, IndexWrites, LogIndex, new_attempt_log
from iris.cluster.controller.logstore.segment import (
    STRIDE,
    BadLogData,
    InlineLog,
    LogData,
    Segment,
    line_ts,
    split_lines,
)
from iris.rpc.errors import InsufficientStorage, InvalidArgument
from iris.rpc.log_models import AttemptUsage, LogAck, LogChunk, LogPushRequest, LogPushResponse

logger = logging.getLogger(__name__)

SAFE_UID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
_SEGMENTS_OPEN = 4096
_KNOWN = 4 * _SEGMENTS_OPEN
DEFAULT_MAX_AGE_S = 7 * 86400.0
DEFAULT_MAX_TOTAL_BYTES = 10 * 1024**3
# A log stays inline in the index while it holds at most this much; the push that would take it
# past either bound moves it to its own file. 64 KiB holds a few hundred lines (a short task's
# output, a traceback) and reads back in one small query; past it a log is big enough that its
# own file costs little beside its lines. At most STRIDE lines: an inline log needs no checkpoint
# but line 0, so it answers time seeks exactly as a file this short does.
# One job's output may take at most this much of the store (every attempt of it together): past
# it, each attempt's log ends with one marker line and the rest is acknowledged but not kept, so
# one user's flood cannot fill the controller's disk for everyone.
DEFAULT_MAX_JOB_BYTES = 1000**3
DEFAULT_INLINE_MAX_BYTES = 64 * 1024
DEFAULT_INLINE_MAX_LINES = STRIDE

# The owners of these attempts, (task id, attempt number) each, for those the controller made
# (one call a push, for the attempts the store has not seen lately).
Resolver = Callable[[Sequence[str]], Mapping[str, "tuple[str, int]"]]


class LogStore:
    def __init__(
        self,
        root: Path | None,
        *,
        max_age_s: float = DEFAULT_MAX_AGE_S,
        max_total_bytes: int = DEFAULT_MAX_TOTAL_BYTES,
        inline_max_bytes: int = DEFAULT_INLINE_MAX_BYTES,
        inline_max_lines: int = DEFAULT_INLINE_MAX_LINES,
        max_job_bytes: int = DEFAULT_MAX_JOB_BYTES,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if not 0 <= inline_max_lines <= STRIDE:
            raise ValueError(f"inline_max_lines must be within 0..{STRIDE}")
        # A store with no root of its own owns a temporary one, removed on close or, for a store
        # nobody closed, when it is collected or the process exits.
        self._remove_tmp: Callable[[], object] | None = None
        if root is None:
            owned_tmp = tempfile.mkdtemp(prefix="iris-logs-")
            self._remove_tmp = weakref.finalize(self, shutil.rmtree, owned_tmp, True)
            root = Path(owned_tmp)
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self.max_age_s = max_age_s
        self.max_total_bytes = max_total_bytes
        self.inline_max_bytes = inline_max_bytes
        self.inline_max_lines = inline_max_lines
        self.max_job_bytes = max_job_bytes
        self.clock = clock
        self._job_bytes: dict[str, int] = {}  # job id -> bytes stored (read once, then kept)
        self._truncated: set[str] = set()  # attempts whose log ended with the over-limit marker
        self.index = LogIndex(self.root / "index.sqlite3")
        # One push or retention drop at a time: each reads the rows it changes and writes them
        # back in its transaction, and the cache of rows below is theirs.
        self._writing = threading.Lock()
        self._known: dict[str, AttemptLog | None] = {}  # committed rows; None: dropped
        self._lock = threading.Lock()  # the open segments, shared with readers
        self._segments: OrderedDict[str, Segment] = OrderedDict()
        self._changed = threading.Condition()
        self._stop = threading.Event()
        self._retention_thread: threading.Thread | None = None

    # ------------------------------------------------------------------ lifecycle

    def start(self, interval_s: float = 60.0) -> None:
        if self._retention_thread is not None:
            return

        def loop() -> None:
            while not self._stop.wait(interval_s):
                try:
                    self.enforce_retention()
                except Exception:
                    logger.exception("log retention failed")

        self._retention_thread = threading.Thread(target=loop, name="iris-log-retention", daemon=True)
        self._retention_thread.start()

    def close(self) -> None:
        self._stop.set()
        if self._retention_thread is not None:
            self._retention_thread.join(timeout=5)
        self.index.close()
        if self._remove_tmp is not None:
            self._remove_tmp()

    # ------------------------------------------------------------------ writing

    def push(self, request: LogPushRequest, resolve: Resolver) -> LogPushResponse:
        """Store what continues each attempt's log; answer how far each one is stored."""
        now = self.clock()
        acks: dict[str, LogAck] = {}
        writes = IndexWrites(now=now)
        # The owners of attempts not seen yet, asked in one call and before taking the write lock:
        # the resolver waits for the controller database, which the control loop writes.
        unseen = list(
            dict.fromkeys(c.attempt_uid for c in request.chunks if c.attempt_uid not in self._known)
        )
        owners: Mapping[str, tuple[str, int]] = resolve(unseen) if unseen else {}
        try:
            with self._writing:
                metas, fresh = self._lookup(request.chunks, owners, now)
                spilled: dict[str, Segment] = {}
                try:
                    for chunk in request.chunks:
                        acks[chunk.attempt_uid] = self._store_chunk(chunk, metas, fresh, writes, spilled)
                finally:
                    # What earlier chunks stored is indexed even when a later one is refused.
                    self._write_index(writes, spilled)
        except (OSError, sqlite3.OperationalError) as exc:
            if not _no_space(exc):
                raise
            self._job_bytes.clear()  # what was counted may not have been written
            message = f"the controller's log store disk is full ({self.root}): log lines are not kept until space is freed"
            note_disk_full(f"{message} ({exc})")
            raise InsufficientStorage(message) from None
        if writes.adds or writes.updates:
            with self._changed:
                self._changed.notify_all()
        return LogPushResponse(acks=acks)

    def _lookup(
        self, chunks: Sequence[LogChunk], owners: Mapping[str, tuple[str, int]], now: float
    ) -> tuple[dict[str, AttemptLog | None], set[str]]:
        """Each pushed attempt's row (None: not the controller's, or dropped), and which are new.

        Rows not cached are read in one query; an attempt without one is new if ``owners`` has
        it. An attempt the controller never made is not cached, as it may be created a moment
        later."""
        metas: dict[str, AttemptLog | None] = {}
        unknown: list[str] = []
        for chunk in chunks:
            uid = chunk.attempt_uid
            if uid in metas:
                continue
            if uid in self._known:
                metas[uid] = self._known[uid]
            else:
                metas[uid] = None
                unknown.append(uid)
        fresh: set[str] = set()
        if not unknown:
            return metas, fresh
        rows = self.index.get_many(unknown)
        for uid in unknown:
            row = rows.get(uid)
            if row is not None:
                self._remember(uid, row)
            elif uid in owners:
                row = new_attempt_log(uid, *owners[uid], now)
                fresh.add(uid)
            metas[uid] = row
        return metas, fresh

    def _remember(self, uid: str, meta: AttemptLog | None) -> None:
        self._known[uid] = meta
        if len(self._known) > _KNOWN:  # forget the oldest quarter at once: O(1) a row over time
            for old in list(islice(self._known, _KNOWN // 4)):
                del self._known[old]

    def _store_chunk(
        self,
        chunk: LogChunk,
        metas: dict[str, AttemptLog | None],
        fresh: set[str],
        writes: IndexWrites,
        spilled: dict[str, Segment],
    ) -> LogAck:
        uid = chunk.attempt_uid
        meta = metas[uid]
        if meta is None:
            return LogAck(lines=-1, final=True)
        try:
            data = chunk.data.encode("utf-8")
            raw_lines = split_lines(data)
            if uid in self._truncated:  # over its job's limit: acknowledged, not kept
                return self._past_limit(chunk, meta, len(raw_lines), writes, metas)
            sent: int | None = None
            used = self._job_used(meta.job_id)
            if used + len(data) > self.max_job_bytes and chunk.first_line == meta.lines and raw_lines:
                # The first chunk past the limit: one marker line in place of it, then nothing.
                self._truncated.add(uid)
                marker = (
                    f"[iris] the output of job {meta.job_id} went over its {self.max_job_bytes}-byte log limit"
                    " (logs.max_job_size): the rest of this attempt's output is not kept"
                )
                data = encode_marker(line_ts(raw_lines[0]), marker)
                sent, raw_lines = len(raw_lines), split_lines(data)
            if meta.inline:
                size = self._append_inline(meta, chunk.first_line, data, raw_lines, writes, spilled)
            else:
                segment = spilled.get(uid) or self._file_segment(uid)
                segment.append_at(chunk.first_line, raw_lines)
                size = _size_of(segment, inline=False)
        except BadLogData as exc:
            raise InvalidArgument(f"log push for attempt {uid}: {exc}") from None
        stored = size[0]
        final = meta.final or (chunk.final and chunk.first_line + len(raw_lines) <= stored)
        updated = meta
        if stored != meta.lines or final != meta.final or size[4] != meta.inline:
            lines, nbytes, first_ts, last_ts, inline = size
            updated = AttemptLog(
                uid,
                meta.task_id,
                meta.job_id,
                meta.attempt_number,
                lines,
                nbytes,
                first_ts,
                last_ts,
                final,
                writes.now,
                inline,
            )
        if uid in fresh:
            writes.adds[uid] = updated  # written whole, with what this push stored
        elif updated is not meta:
            writes.updates[uid] = updated
        metas[uid] = updated
        self._job_bytes[meta.job_id] = self._job_used(meta.job_id) + updated.bytes - meta.bytes
        if sent is not None:  # the marker stands for every line of this chunk
            return LogAck(lines=chunk.first_line + sent, final=final)
        if chunk.usage is not None:
            writes.usages.append((uid, chunk.usage))
        return LogAck(lines=stored, final=final)

    def _job_used(self, job_id: str) -> int:
        used = self._job_bytes.get(job_id)
        if used is None:
            used = self._job_bytes[job_id] = self.index.job_bytes(job_id)
            if len(self._job_bytes) > _KNOWN:
                del self._job_bytes[next(iter(self._job_bytes))]
        return used

    def _past_limit(
        self,
        chunk: LogChunk,
        meta: AttemptLog,
        sent: int,
        writes: IndexWrites,
        metas: dict[str, AttemptLog | None],
    ) -> LogAck:
        """Acknowledge a truncated attempt's lines without keeping them (the sender moves on);
        its row keeps what is stored (the marker last) and takes the final flag."""
        uid = meta.attempt_uid
        if chunk.final and not meta.final:
            done = dataclasses.replace(meta, final=True, updated_at=writes.now)
            if uid in writes.adds:
                writes.adds[uid] = done
            else:
                writes.updates[uid] = done
            metas[uid] = meta = done
        return LogAck(lines=chunk.first_line + sent, final=meta.final)

    def _append_inline(
        self,
        meta: AttemptLog,
        first_line: int,
        data: bytes,
        raw_lines: list[bytes],
        writes: IndexWrites,
        spilled: dict[str, Segment],
    ) -> _Size:
        """Store what continues an inline log: inline while it stays within the bound, else move
        the whole log to its file. Lines are checked as a segment checks them."""
        held = meta.lines
        if first_line > held or first_line + len(raw_lines) <= held:
            # A gap (the sender rewinds to ``held``), or nothing new.
            return (held, meta.bytes, meta.first_ts, meta.last_ts, True)
        new = raw_lines[held - first_line :]
        payload = data if held == first_line else b"\n".join(new) + b"\n"
        lines = held + len(new)
        size = meta.bytes + len(payload)
        if size > self.inline_max_bytes or lines > self.inline_max_lines:
            return self._spill(meta, new, writes, spilled)
        first_ts = meta.first_ts if meta.first_ts is not None else line_ts(new[0])
        last_ts = line_ts(new[-1])
        if meta.last_ts is not None and meta.last_ts > last_ts:
            last_ts = meta.last_ts
        writes.appends.append((meta.attempt_uid, held, payload))
        return (lines, size, first_ts, last_ts, True)

    def _spill(
        self, meta: AttemptLog, new: list[bytes], writes: IndexWrites, spilled: dict[str, Segment]
    ) -> _Size:
        """Write an inline log and its new lines to its file, whole; the row flips with the push's
        index transaction (until then the row is the truth and the file unread)."""
        uid = meta.attempt_uid
        held = self.index.inline_log(uid) or b""
        pending = [a for a in writes.appends if a[0] == uid]  # earlier chunks of this push
        held += b"".join(a[2] for a in pending)
        path = self._data_path(uid)
        path.parent.mkdir(exist_ok=True)
        _delete_files(path)  # what an earlier, unfinished spill of this log left
        segment = Segment(path)
        segment.append_at(0, (held[:-1].split(b"\n") if held else []) + new)  # checks, then writes
        if pending:  # in the file now, not to be added inline
            writes.appends = [a for a in writes.appends if a[0] != uid]
        if meta.last_ts is not None and (segment.last_ts is None or meta.last_ts > segment.last_ts):
            # The latest time of every push so far, as if each had been appended on its own.
            segment.last_ts = meta.last_ts
        spilled[uid] = segment
        writes.spills.append(uid)
        return _size_of(segment, inline=False)

    def _write_index(self, writes: IndexWrites, spilled: dict[str, Segment]) -> None:
        try:
            self.index.write(writes)
        except BaseException:
            # Not indexed after all: the next push reads (or adds) each row again. A log spilled
            # by this push stays inline (its file is not opened for reading).
            for uid in (*writes.adds, *writes.updates):
                self._known.pop(uid, None)
            raise
        for uid, meta in (*writes.adds.items(), *writes.updates.items()):
            self._remember(uid, meta)
        if spilled:
            with self._lock:
                for uid, segment in spilled.items():
                    self._open(uid, segment)

    def wait_for_lines(self, timeout: float) -> None:
        """Block until some push stores lines (or the timeout): lets a follower poll without spinning."""
        with self._changed:
            self._changed.wait(timeout)

    # ------------------------------------------------------------------ reading

    def segment(self, attempt_uid: str) -> LogData:
        """One attempt's log as stored now: its inline lines as of the last push, or its file."""
        if not SAFE_UID.match(attempt_uid):
            raise InvalidArgument(f"attempt uid {attempt_uid!r} is not a plain name")
        with self._lock:
            segment = self._segments.get(attempt_uid)
        if segment is not None:
            return segment
        inline = self.index.inline_log(attempt_uid)
        if inline is not None:
            return InlineLog(inline)
        return self._file_segment(attempt_uid)

    def logs(self, attempt_uids: Sequence[str]) -> dict[str, LogData]:
        """``segment`` of many attempts, their inline logs read in one query."""
        for uid in attempt_uids:
            if not SAFE_UID.match(uid):
                raise InvalidArgument(f"attempt uid {uid!r} is not a plain name")
        out: dict[str, LogData] = {}
        with self._lock:
            for uid in attempt_uids:
                segment = self._segments.get(uid)
                if segment is not None:
                    out[uid] = segment
        rest = [uid for uid in attempt_uids if uid not in out]
        for uid, inline in self.index.inline_logs(rest).items():
            out[uid] = InlineLog(inline) if inline is not None else self._file_segment(uid)
        return out

    def stored_lines(self, attempt_uids: Sequence[str]) -> dict[str, int]:
        """How many lines each attempt's log holds now (0 for an attempt without a log)."""
        rows = self.index.get_many(attempt_uids)
        out: dict[str, int] = {}
        for uid in attempt_uids:
            row = rows.get(uid)
            if row is None:
                out[uid] = 0
            elif row.inline:
                out[uid] = row.lines
            else:
                out[uid] = self._file_segment(uid).lines
        return out

    def _data_path(self, attempt_uid: str) -> Path:
        if not SAFE_UID.match(attempt_uid):
            raise InvalidArgument(f"attempt uid {attempt_uid!r} is not a plain name")
        return self.root / attempt_uid[:2] / f"{attempt_uid}.jsonl"

    def _file_segment(self, attempt_uid: str) -> Segment:
        """The segment of a log kept in its file (opened once, then cached)."""
        path = self._data_path(attempt_uid)
        with self._lock:
            segment = self._segments.pop(attempt_uid, None)
            if segment is None:
                path.parent.mkdir(exist_ok=True)
                segment = Segment(path)
            self._open(attempt_uid, segment)
            return segment

    def _open(self, attempt_uid: str, segment: Segment) -> None:
        self._segments.pop(attempt_uid, None)
        self._segments[attempt_uid] = segment
        while len(self._segments) > _SEGMENTS_OPEN:
            self._segments.popitem(last=False)

    def attempt(self, attempt_uid: str) -> AttemptLog | None:
        return self.index.get(attempt_uid)

    def attempts_of_job(self, job_id: str, *, include_children: bool = False) -> list[AttemptLog]:
        return self.index.of_job(job_id, include_children=include_children)

    def attempts_of_tasks(self, task_ids: list[str]) -> list[AttemptLog]:
        return self.index.of_tasks(task_ids)

    def usage(self, attempt_uids: list[str]) -> dict[str, AttemptUsage]:
        return self.index.usage_of(attempt_uids)

    # ------------------------------------------------------------------ retention

    def enforce_retention(self) -> int:
        """Drop logs older than ``max_age_s``, then the oldest until under ``max_total_bytes``
        (inline logs and files alike: ``total_bytes`` counts both)."""
        now = self.clock()
        dropped = 0
        while True:
            doomed = self.index.older_than(now - self.max_age_s)
            if not doomed:
                break
            self._drop(doomed)
            dropped += len(doomed)
        total = self.index.total_bytes()
        while total > self.max_total_bytes:
            doomed: list[AttemptLog] = []
            for meta in self.index.oldest(limit=100):
                doomed.append(meta)
                total -= meta.bytes
                if total <= self.max_total_bytes:
                    break
            if not doomed:
                break
            self._drop(doomed)
            dropped += len(doomed)
        if dropped:
            logger.info("log retention dropped the logs of %d attempts", dropped)
        return dropped

    def _drop(self, metas: list[AttemptLog]) -> None:
        with self._writing:  # no push adds to a log while it goes
            for meta in metas:
                with self._lock:
                    segment = self._segments.pop(meta.attempt_uid, None)
                if segment is not None:
                    segment.delete()
                else:  # an inline log may have a file too, left by a spill that never finished
                    _delete_files(self._data_path(meta.attempt_uid))
                # A worker that pushes this attempt again is told to stop.
                self._remember(meta.attempt_uid, None)
            self.index.remove(m.attempt_uid for m in metas)


# What a log holds after a push: lines, bytes, first and last timestamps, kept inline.
_Size = tuple[int, int, "float | None", "float | None", bool]


def _size_of(segment: Segment, *, inline: bool) -> _Size:
    return (segment.lines, segment.bytes, segment.first_ts, segment.last_ts, inline)


def _delete_files(data_path: Path) -> None:
    """Delete a log's data and index files, if it has them."""
    data_path.unlink(missing_ok=True)
    data_path.with_suffix(".idx").unlink(missing_ok=True)


def encode_marker(ts: float, text: str) -> bytes:
    """One system line, as a worker writes it."""
    return b'{"ts":%.6f,"stream":"system","line":%s}\n' % (ts, json.dumps(text).encode())


def _no_space(exc: BaseException) -> bool:
    if isinstance(exc, OSError):
        return exc.errno in (errno.ENOSPC, errno.EDQUOT)
    return "disk is full" in str(exc) or getattr(exc, "sqlite_errorcode", None) == sqlite3.SQLITE_FULL
