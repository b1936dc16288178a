"""The controller's log store: every attempt's log lines, kept under the state dir after the machine
that produced them is gone.

Workers push lines numbered from 0 per attempt; the store keeps what continues what it has and
answers how many lines it holds, so a sender that lost its place (a restart on either side)
simply resends from there. Nothing here runs on the control loop's thread.
"""

from __future__ import annotations

import logging
import re
import shutil
import tempfile
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from iris.cluster.controller.logstore.index import AttemptLog, IndexWrites, LogIndex, new_attempt_log
from iris.cluster.controller.logstore.segment import BadLogData, Segment, split_lines
from iris.rpc.errors import InvalidArgument
from iris.rpc.log_models import AttemptUsage, LogAck, LogChunk, LogPushRequest, LogPushResponse

logger = logging.getLogger(__name__)

SAFE_UID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
_SEGMENTS_OPEN = 4096
DEFAULT_MAX_AGE_S = 7 * 86400.0
DEFAULT_MAX_TOTAL_BYTES = 10 * 1024**3

# attempt uid -> (task id, attempt number), or None when the controller never made that attempt.
Resolver = Callable[[str], "tuple[str, int] | None"]


class LogStore:
    def __init__(
        self,
        root: Path | None,
        *,
        max_age_s: float = DEFAULT_MAX_AGE_S,
        max_total_bytes: int = DEFAULT_MAX_TOTAL_BYTES,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._owned_tmp: str | None = None
        if root is None:
            self._owned_tmp = tempfile.mkdtemp(prefix="iris-logs-")
            root = Path(self._owned_tmp)
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self.max_age_s = max_age_s
        self.max_total_bytes = max_total_bytes
        self.clock = clock
        self.index = LogIndex(self.root / "index.sqlite3")
        self._lock = threading.Lock()
        self._segments: OrderedDict[str, Segment] = OrderedDict()
        self._known: dict[str, AttemptLog | None] = {}
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
        if self._owned_tmp is not None:
            shutil.rmtree(self._owned_tmp, ignore_errors=True)

    # ------------------------------------------------------------------ writing

    def push(self, request: LogPushRequest, resolve: Resolver) -> LogPushResponse:
        """Store what continues each attempt's log; answer how far each one is stored."""
        now = self.clock()
        acks: dict[str, LogAck] = {}
        writes = IndexWrites(now=now)
        try:
            for chunk in request.chunks:
                acks[chunk.attempt_uid] = self._store_chunk(chunk, resolve, now, writes)
        finally:
            # What earlier chunks stored is indexed even when a later one is refused.
            self._write_index(writes)
        if writes.updates:
            with self._changed:
                self._changed.notify_all()
        return LogPushResponse(acks=acks)

    def _store_chunk(self, chunk: LogChunk, resolve: Resolver, now: float, writes: IndexWrites) -> LogAck:
        meta = self._meta(chunk.attempt_uid, resolve, now, writes)
        if meta is None:
            return LogAck(lines=-1, final=True)
        try:
            raw_lines = split_lines(chunk.data.encode("utf-8"))
        except BadLogData as exc:
            raise InvalidArgument(f"log push for attempt {chunk.attempt_uid}: {exc}") from None
        segment = self.segment(chunk.attempt_uid)
        before = segment.lines
        try:
            stored = segment.append_at(chunk.first_line, raw_lines)
        except BadLogData as exc:
            raise InvalidArgument(f"log push for attempt {chunk.attempt_uid}: {exc}") from None
        final = meta.final or (chunk.final and chunk.first_line + len(raw_lines) <= stored)
        if stored != before or final != meta.final:
            updated = replace(
                meta,
                lines=stored,
                bytes=segment.bytes,
                first_ts=segment.first_ts,
                last_ts=segment.last_ts,
                final=final,
                updated_at=now,
            )
            writes.updates.append(updated)
            self._known[chunk.attempt_uid] = updated
        if chunk.usage is not None:
            writes.usages.append((chunk.attempt_uid, chunk.usage))
        return LogAck(lines=stored, final=final)

    def _write_index(self, writes: IndexWrites) -> None:
        try:
            self.index.write(writes)
        except BaseException:
            with self._lock:  # not indexed after all: the next push reads (or adds) the row again
                for row in (*writes.adds, *writes.updates):
                    self._known.pop(row.attempt_uid, None)
            raise

    def wait_for_lines(self, timeout: float) -> None:
        """Block until some push stores lines (or the timeout): lets a follower poll without spinning."""
        with self._changed:
            self._changed.wait(timeout)

    def record_usage(self, attempt_uid: str, usage: AttemptUsage) -> None:
        self.index.set_usage(attempt_uid, usage, self.clock())

    def _meta(
        self, attempt_uid: str, resolve: Resolver, now: float, writes: IndexWrites
    ) -> AttemptLog | None:
        if attempt_uid in self._known:
            return self._known[attempt_uid]
        meta = self.index.get(attempt_uid)
        if meta is None:
            owner = resolve(attempt_uid)
            if owner is None:
                return None  # not cached: the attempt may be created a moment later
            meta = new_attempt_log(attempt_uid, *owner, now)
            writes.adds.append(meta)
        with self._lock:
            self._known[attempt_uid] = meta
            while len(self._known) > 4 * _SEGMENTS_OPEN:
                self._known.pop(next(iter(self._known)))
        return meta

    # ------------------------------------------------------------------ reading

    def segment(self, attempt_uid: str) -> Segment:
        if not SAFE_UID.match(attempt_uid):
            raise InvalidArgument(f"attempt uid {attempt_uid!r} is not a plain name")
        with self._lock:
            segment = self._segments.pop(attempt_uid, None)
            if segment is None:
                folder = self.root / attempt_uid[:2]
                folder.mkdir(exist_ok=True)
                segment = Segment(folder / f"{attempt_uid}.jsonl")
            self._segments[attempt_uid] = segment
            while len(self._segments) > _SEGMENTS_OPEN:
                self._segments.popitem(last=False)
            return segment

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
        """Drop logs older than ``max_age_s``, then the oldest until under ``max_total_bytes``."""
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
            doomed = []
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
        for meta in metas:
            self.segment(meta.attempt_uid).delete()
            with self._lock:
                self._segments.pop(meta.attempt_uid, None)
                # A worker that pushes this attempt again is told to stop.
                self._known[meta.attempt_uid] = None
        self.index.remove(m.attempt_uid for m in metas)
