"""Reading the log store like a person: tails, time windows, grep, several tasks interleaved by time.

Every mode reads only what it returns (plus a bounded scan for filters): a tail reads backwards
from the end of each attempt's log, ``since`` seeks by the time index, a follow cursor continues
where the previous answer stopped. A small log kept inline in the index is read whole (it is at
most the store's inline bound), a few hundred attempts' in one query.
"""

from __future__ import annotations

import heapq
import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, cast

from iris.cluster.controller.logstore.index import AttemptLog
from iris.cluster.controller.logstore.log_store import LogStore
from iris.cluster.controller.logstore.segment import LogData, RawLine
from iris.rpc.errors import InvalidArgument
from iris.rpc.log_models import StoredLine

MAX_LIMIT = 100_000
MAX_GREP_LENGTH = 256
# A filtered read scans at most this many lines of one attempt per answer (the cursor goes on from there).
MAX_SCAN = 500_000
_MAX_PATTERN_MEMORY = 8 << 20  # RE2's program size bound: a huge repetition count is refused, not built
_OPEN_AT_ONCE = 256

# One stored line decoded: ``ts``, ``stream`` and ``line`` (JSON, as the log store wrote it).
LogEntry = dict[str, Any]


@dataclass(frozen=True)
class LogQuery:
    tasks: frozenset[int] | None = None
    # None: each task's current (else latest) attempt; "all": every attempt; N: attempt number N.
    attempt: int | Literal["all"] | None = None
    since: float | None = None
    until: float | None = None
    grep: str | None = None
    ignore_case: bool = False
    tail: int | None = None
    limit: int = 10_000
    include_system: bool = False
    # Follow cursor: attempt uid -> next line number.
    after: Mapping[str, int] | None = None
    _pattern: Any = field(default=None, compare=False)

    def compiled(self) -> Any:
        """The grep pattern compiled by RE2 (``google-re2``): its matching time is linear in the
        line whatever the pattern, so no pattern (``(a+)+$``) can hold the controller. RE2 has no
        backreferences or lookarounds; such a pattern is refused like a malformed one."""
        if not self.grep:
            return None
        return compile_user_pattern(self.grep, ignore_case=self.ignore_case)


def compile_user_pattern(pattern: str, *, ignore_case: bool = False) -> Any:
    """A user's regular expression, compiled for linear-time matching; InvalidArgument (one sentence)
    when it is too long, malformed, or needs what a linear-time engine cannot do."""
    if len(pattern) > MAX_GREP_LENGTH:
        raise InvalidArgument(f"the grep pattern is longer than {MAX_GREP_LENGTH} characters")
    import re2  # loaded by the first grep, not by every controller (~3 MB)

    options = re2.Options()
    options.case_sensitive = not ignore_case
    options.log_errors = False  # the answer says why; the controller's log is not the place
    options.max_mem = _MAX_PATTERN_MEMORY
    try:
        return re2.compile(pattern, options)
    except re2.error as exc:
        reason = (
            exc.args[0].decode("utf-8", "replace") if exc.args and isinstance(exc.args[0], bytes) else exc
        )
        raise InvalidArgument(
            f"the grep pattern is not a valid regular expression: {reason} (RE2 syntax: no backreferences or lookarounds)"
        ) from None


def parse_cursor(text: str | None) -> dict[str, int] | None:
    """``uid:n,uid:n`` -> {uid: n}; None for no cursor."""
    if text is None:
        return None
    out: dict[str, int] = {}
    for part in text.split(","):
        if not part:
            continue
        uid, _, number = part.rpartition(":")
        if not uid or not number.isdigit():
            raise InvalidArgument(f"bad log cursor {part!r}: expected attempt:line")
        out[uid] = int(number)
    return out


def format_cursor(positions: Mapping[str, int]) -> str:
    return ",".join(f"{uid}:{n}" for uid, n in sorted(positions.items()))


def select_attempts(
    attempts: Sequence[AttemptLog], query: LogQuery, current: Mapping[str, str] | None = None
) -> list[AttemptLog]:
    """The attempts a query reads: by task index, then by attempt number (or the current one)."""
    chosen = [a for a in attempts if query.tasks is None or a.task_index in query.tasks]
    if query.attempt == "all":
        return sorted(chosen, key=lambda a: (a.task_id, a.attempt_number))
    if isinstance(query.attempt, int):
        return [a for a in chosen if a.attempt_number == query.attempt]
    current = current or {}
    by_task: dict[str, AttemptLog] = {}
    for a in sorted(chosen, key=lambda a: a.attempt_number):
        if by_task.get(a.task_id) is None or by_task[a.task_id].attempt_uid != current.get(a.task_id):
            by_task[a.task_id] = a  # the latest so far, unless the current one was already seen
    return sorted(by_task.values(), key=lambda a: a.task_index)


@dataclass(slots=True)
class QueryResult:
    lines: list[StoredLine]
    cursor: dict[str, int]
    truncated: bool


class _Reader:
    def __init__(self, query: LogQuery) -> None:
        self.query = query
        self.pattern = query.compiled()

    def keep(self, entry: LogEntry) -> bool:
        q = self.query
        if not q.include_system and entry.get("stream") == "system":
            return False
        ts = entry.get("ts", 0.0)
        if q.since is not None and ts < q.since:
            return False
        if q.until is not None and ts > q.until:
            return False
        return not (self.pattern is not None and self.pattern.search(entry.get("line", "")) is None)

    @property
    def filtering(self) -> bool:
        q = self.query
        return (
            (not q.include_system) or q.since is not None or q.until is not None or self.pattern is not None
        )


def _stored(meta: AttemptLog, raw: RawLine, entry: LogEntry) -> StoredLine:
    return StoredLine.model_construct(
        task_id=meta.task_id,
        task_index=meta.task_index,
        attempt_number=meta.attempt_number,
        attempt_uid=meta.attempt_uid,
        offset=raw.offset,
        ts=float(entry.get("ts", 0.0)),
        stream=entry.get("stream", "stdout"),
        line=str(entry.get("line", "")),
    )


def _decode(raw: RawLine) -> LogEntry:
    try:
        entry = json.loads(raw.raw)
    except ValueError:
        return {"ts": 0.0, "stream": "system", "line": "(unreadable log line)"}
    if not isinstance(entry, dict):
        return {"ts": 0.0, "stream": "system", "line": str(entry)}
    return cast("LogEntry", entry)  # a JSON object as the store wrote it


def _tail(segment: LogData, n: int, reader: _Reader) -> tuple[list[tuple[RawLine, LogEntry]], bool]:
    """The last ``n`` kept lines, and whether kept lines may exist before them."""
    if not reader.filtering:
        raw = segment.tail(n)
        return [(r, _decode(r)) for r in raw], bool(raw) and raw[0].offset > 0
    found: list[tuple[RawLine, LogEntry]] = []
    end = segment.lines
    floor = segment.line_at_time(reader.query.since) if reader.query.since is not None else 0
    window = max(256, 2 * n)
    scanned = 0
    while end > floor and len(found) < n and scanned < MAX_SCAN:
        start = max(floor, end - window)
        block = segment.read(start, end - start)
        scanned += len(block)
        kept = [(r, e) for r in block if reader.keep(e := _decode(r))]
        found[:0] = kept
        end = start
        window = min(window * 4, 65_536)
    more = len(found) > n or end > floor
    return found[-n:], more


def tail_lines(segment: LogData, n: int) -> list[str]:
    """The last ``n`` output lines (no system lines) of a log, as text."""
    rows, _ = _tail(segment, n, _Reader(LogQuery()))
    return [str(entry.get("line", "")) for _, entry in rows]


def _forward(
    segment: LogData, start: int, limit: int, reader: _Reader
) -> tuple[list[tuple[RawLine, LogEntry]], int]:
    """Kept lines from line ``start`` on (at most ``limit``), and the line to continue from."""
    out: list[tuple[RawLine, LogEntry]] = []
    position = start
    if reader.query.since is not None:
        position = max(position, segment.line_at_time(reader.query.since))
    scanned = 0
    for raw in segment.iter_all(position):
        entry = _decode(raw)
        position = raw.offset + 1
        scanned += 1
        if reader.keep(entry):
            out.append((raw, entry))
            if len(out) >= limit:
                break
        if scanned >= MAX_SCAN:
            break
        if reader.query.until is not None and entry.get("ts", 0.0) > reader.query.until + 60:
            position = segment.lines  # past the window (with slack for clock steps): nothing more
            break
    return out, max(position, start)


def run_query(store: LogStore, attempts: Sequence[AttemptLog], query: LogQuery) -> QueryResult:
    reader = _Reader(query)
    limit = max(1, min(query.limit, MAX_LIMIT))
    per_attempt: list[list[StoredLine]] = []
    cursor: dict[str, int] = {}
    truncated = False
    follow = query.after is not None
    logs: dict[str, LogData] = {}
    for i, meta in enumerate(attempts):
        if i % _OPEN_AT_ONCE == 0:  # inline logs in one query per batch, not all held at once
            logs = store.logs([m.attempt_uid for m in attempts[i : i + _OPEN_AT_ONCE]])
        segment = logs[meta.attempt_uid]
        if follow:
            assert query.after is not None
            start = query.after.get(meta.attempt_uid, 0)
            rows, cursor[meta.attempt_uid] = _forward(segment, start, limit, reader)
        elif query.tail is not None:
            rows, more = _tail(segment, min(query.tail, MAX_LIMIT), reader)
            truncated = truncated or more
            cursor[meta.attempt_uid] = segment.lines
        else:
            rows, cursor[meta.attempt_uid] = _forward(segment, 0, limit, reader)
        per_attempt.append([_stored(meta, raw, entry) for raw, entry in rows])
    merged = list(heapq.merge(*per_attempt, key=lambda line: line.ts))
    if query.tail is not None and not follow:
        if len(merged) > MAX_LIMIT:
            merged = merged[-MAX_LIMIT:]
            truncated = True
        return QueryResult(merged, cursor, truncated)
    if len(merged) > limit:
        merged = merged[:limit]
        # Each attempt continues right after its last line that made the cut.
        last: dict[str, int] = {}
        for line in merged:
            last[line.attempt_uid] = line.offset + 1
        for meta, rows in zip(attempts, per_attempt, strict=True):
            if rows:
                cursor[meta.attempt_uid] = last.get(
                    meta.attempt_uid, (query.after or {}).get(meta.attempt_uid, 0)
                )
    return QueryResult(merged, cursor, truncated)


def iter_text(
    store: LogStore, attempts: Sequence[AttemptLog], query: LogQuery, *, prefix: bool, timestamps: bool
) -> Iterator[bytes]:
    """The whole selected log as text lines (for a download), tasks interleaved by time."""
    reader = _Reader(query)

    def lines_of(meta: AttemptLog) -> Iterator[tuple[float, bytes]]:
        for raw in store.segment(meta.attempt_uid).iter_all():
            entry = _decode(raw)
            if not reader.keep(entry):
                continue
            text = str(entry.get("line", ""))
            if timestamps:
                text = f"{_iso(float(entry.get('ts', 0.0)))} {text}"
            if prefix:
                text = f"[task {meta.task_index}] {text}"
            yield float(entry.get("ts", 0.0)), (text + "\n").encode("utf-8", "replace")

    batch: list[bytes] = []
    for _, data in heapq.merge(*(lines_of(m) for m in attempts), key=lambda pair: pair[0]):
        batch.append(data)
        if len(batch) >= 2048:
            yield b"".join(batch)
            batch = []
    if batch:
        yield b"".join(batch)


def _iso(ts: float) -> str:
    from datetime import UTC, datetime

    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
