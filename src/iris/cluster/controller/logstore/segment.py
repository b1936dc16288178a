"""One attempt's stored log, read the same way wherever it is kept (``LogData``).

A small log lives inline in the store's index (see index.py); ``InlineLog`` reads it as it was
at one moment. A log that outgrew that bound is a ``Segment``: an append-only JSON-lines file
plus a sparse index of it.

``<uid>.jsonl`` holds one ``{"ts","stream","line"}`` object per line, exactly as the worker wrote
it. ``<uid>.idx`` holds a 16-byte record (byte offset, timestamp) for every ``STRIDE``-th line, so
reading from line N or from time T seeks close to it, and a tail reads backwards from the end:
every read costs what it returns, not the size of the log. A log shorter than ``STRIDE`` lines
has no index file (its only checkpoint is line 0 at byte 0).

A segment's data file is the truth: on open, a torn last line is cut off and the index is
completed from the last checkpoint it has.
"""

from __future__ import annotations

import bisect
import json
import os
import struct
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from itertools import accumulate, repeat
from operator import add
from pathlib import Path
from typing import Any, Protocol

STRIDE = 1024
_RECORD = struct.Struct("<Qd")
_BACK_CHUNK = 64 * 1024


class BadLogData(ValueError):
    """Pushed bytes that are not JSON log lines."""


@dataclass(frozen=True, slots=True)
class RawLine:
    offset: int
    raw: bytes

    def decode(self) -> dict[str, Any]:
        return json.loads(self.raw)


def line_ts(raw: bytes) -> float:
    """The ``ts`` of an encoded line without parsing all of it (it is always written first)."""
    if raw.startswith(b'{"ts":'):
        end = raw.find(b",", 6)
        if end > 6:
            try:
                return float(raw[6:end])
            except ValueError:
                pass
    try:
        return float(json.loads(raw)["ts"])
    except (ValueError, KeyError, TypeError) as exc:
        raise BadLogData("a log line has no timestamp") from exc


def split_lines(data: bytes) -> list[bytes]:
    """Complete lines of pushed data (each must be a JSON object on one line).

    Checked with whole-buffer counts, not a loop per line: a line cannot hold a newline, so
    every line starts with ``{`` and ends with ``}`` exactly when each newline is preceded by
    ``}`` and (but the last) followed by ``{``.
    """
    if not data:
        return []
    if not data.endswith(b"\n"):
        raise BadLogData("pushed log data must end with a newline")
    count = data.count(b"\n")
    if not data.startswith(b"{") or data.count(b"}\n") != count or data.count(b"\n{") != count - 1:
        raise BadLogData("every pushed log line must be one JSON object")
    return data[:-1].split(b"\n")


class LogData(Protocol):
    """The reads of one attempt's log (a ``Segment`` or an ``InlineLog``); lines numbered from 0."""

    @property
    def lines(self) -> int: ...

    def read(self, start: int, limit: int) -> list[RawLine]: ...

    def iter_all(self, start: int = 0) -> Iterator[RawLine]: ...

    def tail(self, n: int, before: int | None = None) -> list[RawLine]: ...

    def line_at_time(self, ts: float) -> int: ...


class InlineLog:
    """The lines of a log kept inline in the index, as they were when read: the reads of a Segment.

    An inline log is at most ``STRIDE`` lines (the store spills it to a file before that), so,
    as in a segment that short, its only checkpoint is line 0.
    """

    __slots__ = ("_raw", "bytes")

    def __init__(self, data: bytes) -> None:
        self._raw: list[bytes] = data[:-1].split(b"\n") if data else []
        self.bytes = len(data)

    @property
    def lines(self) -> int:
        return len(self._raw)

    def read(self, start: int, limit: int) -> list[RawLine]:
        """Lines ``[start, start + limit)``."""
        if start >= len(self._raw) or limit <= 0:
            return []
        start = max(0, start)
        end = min(len(self._raw), start + limit)
        return [RawLine(number, self._raw[number]) for number in range(start, end)]

    def iter_all(self, start: int = 0) -> Iterator[RawLine]:
        for number in range(max(0, start), len(self._raw)):
            yield RawLine(number, self._raw[number])

    def tail(self, n: int, before: int | None = None) -> list[RawLine]:
        """The last ``n`` lines (before line ``before``)."""
        end = len(self._raw) if before is None else max(0, min(before, len(self._raw)))
        if n <= 0 or end == 0:
            return []
        first = max(0, end - n)
        return self.read(first, end - first)

    def line_at_time(self, ts: float) -> int:
        """Where lines at or after ``ts`` may start: line 0, the one checkpoint of a log this short."""
        return 0


class Segment:
    """Appends and reads of one attempt's log file. Thread-safe; readers never see a half-appended line."""

    def __init__(self, data_path: Path) -> None:
        self.data_path = data_path
        self.index_path = data_path.with_suffix(".idx")
        self._lock = threading.Lock()
        # checkpoints[k] = (byte offset, ts) of line k*STRIDE
        self._offsets: list[int] = []
        self._times: list[float] = []
        self._indexed = 0  # checkpoints written to the index file
        self.lines = 0
        self.bytes = 0
        self.first_ts: float | None = None
        self.last_ts: float | None = None
        self._recover()

    # ------------------------------------------------------------------ writing

    def append_at(self, first_line: int, lines: list[bytes]) -> int:
        """Store lines ``[first_line, first_line + len(lines))``, skipping those already stored.

        Returns how many lines are stored afterwards. A push that starts past the end (a gap)
        stores nothing: the sender rewinds to the returned count.
        """
        with self._lock:
            if first_line > self.lines:
                return self.lines
            fresh = lines[self.lines - first_line :]
            if fresh:
                self._append_locked(fresh)
            return self.lines

    def _append_locked(self, lines: list[bytes]) -> None:
        position = self.bytes
        number = self.lines
        # Byte offset of each line within the appended block (C-level: no Python loop per line).
        starts = list(accumulate(map(add, map(len, lines), repeat(1)), initial=0))
        first = (-number) % STRIDE
        new_points = [(position + starts[i], line_ts(lines[i])) for i in range(first, len(lines), STRIDE)]
        first_ts = self.first_ts if self.first_ts is not None else line_ts(lines[0])
        last_ts = line_ts(lines[-1])
        payload = b"\n".join(lines) + b"\n"
        with open(self.data_path, "ab") as f:
            f.write(payload)
        for o, t in new_points:
            self._offsets.append(o)
            self._times.append(t)
        if len(self._offsets) > max(1, self._indexed):
            with open(self.index_path, "ab") as f:
                f.write(
                    b"".join(map(_RECORD.pack, self._offsets[self._indexed :], self._times[self._indexed :]))
                )
            self._indexed = len(self._offsets)
        self.lines, self.bytes = number + len(lines), position + starts[-1]
        self.first_ts, self.last_ts = first_ts, max(last_ts, self.last_ts or last_ts)

    def delete(self) -> None:
        with self._lock:
            for path in (self.data_path, self.index_path):
                path.unlink(missing_ok=True)
            self._offsets, self._times = [], []
            self._indexed = 0
            self.lines = self.bytes = 0

    # ------------------------------------------------------------------ reading

    def state(self) -> tuple[int, int, list[int], list[float]]:
        with self._lock:
            return self.lines, self.bytes, self._offsets, self._times

    def read(self, start: int, limit: int) -> list[RawLine]:
        """Lines ``[start, start + limit)``."""
        lines, size, offsets, _ = self.state()
        if start >= lines or limit <= 0:
            return []
        k = min(start // STRIDE, len(offsets) - 1)
        number, position = k * STRIDE, offsets[k]
        out: list[RawLine] = []
        for raw in self._iter_from(position, size):
            if number >= start:
                out.append(RawLine(number, raw))
                if len(out) >= limit:
                    break
            number += 1
        return out

    def iter_all(self, start: int = 0) -> Iterator[RawLine]:
        """Every line from ``start`` on (as stored now), lazily."""
        lines, size, offsets, _ = self.state()
        if start >= lines:
            return
        k = min(start // STRIDE, len(offsets) - 1)
        number, position = k * STRIDE, offsets[k]
        for raw in self._iter_from(position, size):
            if number >= start:
                yield RawLine(number, raw)
            number += 1

    def tail(self, n: int, before: int | None = None) -> list[RawLine]:
        """The last ``n`` lines (before line ``before``), read backwards from the end."""
        lines, size, _, _ = self.state()
        end_line = lines if before is None else max(0, min(before, lines))
        if n <= 0 or end_line == 0:
            return []
        if end_line < lines:
            # Reading from a checkpoint forwards is cheap enough and exact.
            first = max(0, end_line - n)
            return self.read(first, end_line - first)
        chunks: list[bytes] = []
        found = 0
        position = size
        with open(self.data_path, "rb") as f:
            while position > 0 and found <= n:
                step = min(_BACK_CHUNK, position)
                position -= step
                f.seek(position)
                block = f.read(step)
                chunks.append(block)
                found += block.count(b"\n")
        blob = b"".join(reversed(chunks))
        raw_lines = blob[:-1].split(b"\n") if blob else []
        if position > 0:
            raw_lines = raw_lines[1:]  # the first piece may be the end of an earlier line
        raw_lines = raw_lines[-n:]
        first_number = lines - len(raw_lines)
        return [RawLine(first_number + i, raw) for i, raw in enumerate(raw_lines)]

    def line_at_time(self, ts: float) -> int:
        """The first line number whose checkpoint region may hold lines at or after ``ts``."""
        lines, _, offsets, times = self.state()
        if not offsets:
            return lines
        k = bisect.bisect_left(times, ts)
        return max(0, (k - 1) * STRIDE)

    def _iter_from(self, position: int, size: int) -> Iterator[bytes]:
        try:
            f = open(self.data_path, "rb")  # noqa: SIM115 - closed below
        except FileNotFoundError:
            return
        with f:
            f.seek(position)
            remaining = size - position
            leftover = b""
            while remaining > 0:
                block = f.read(min(256 * 1024, remaining))
                if not block:
                    break
                remaining -= len(block)
                parts = (leftover + block).split(b"\n")
                leftover = parts.pop()
                yield from parts
            if leftover:
                yield leftover

    # ------------------------------------------------------------------ recovery

    def _recover(self) -> None:
        """Bring the in-memory counters (and the index file) in line with the data file."""
        try:
            size = self.data_path.stat().st_size
        except FileNotFoundError:
            self.index_path.unlink(missing_ok=True)
            return
        records: list[tuple[int, float]] = []
        try:
            blob = self.index_path.read_bytes()
        except FileNotFoundError:
            blob = b""
        for i in range(len(blob) // _RECORD.size):
            offset, ts = _RECORD.unpack_from(blob, i * _RECORD.size)
            if offset >= size or (records and offset <= records[-1][0]):
                break
            records.append((offset, ts))
        # Scan from the last checkpoint to the end, completing the index and cutting a torn line.
        start_k = max(0, len(records) - 1)
        position = records[start_k][0] if records else 0
        number = start_k * STRIDE if records else 0
        last_ts: float | None = None
        with open(self.data_path, "rb") as f:
            f.seek(position)
            rest = f.read()
        good_end = position
        for raw in rest.split(b"\n")[:-1]:
            if number % STRIDE == 0 and number // STRIDE >= len(records):
                try:
                    records.append((good_end, line_ts(raw)))
                except BadLogData:
                    break
            try:
                last_ts = line_ts(raw)
            except BadLogData:
                break
            good_end += len(raw) + 1
            number += 1
        if good_end < size:
            with open(self.data_path, "r+b") as f:
                f.truncate(good_end)
        if len(records) > 1:
            if blob != b"".join(_RECORD.pack(o, t) for o, t in records):
                with open(self.index_path, "wb") as f:
                    f.write(b"".join(_RECORD.pack(o, t) for o, t in records))
                    f.flush()
                    os.fsync(f.fileno())
            self._indexed = len(records)
        elif blob:
            self.index_path.unlink(missing_ok=True)  # one checkpoint: line 0, known without a file
        self._offsets = [o for o, _ in records]
        self._times = [t for _, t in records]
        self.lines, self.bytes = number, good_end
        self.first_ts = self._times[0] if self._times else None
        self.last_ts = last_ts
