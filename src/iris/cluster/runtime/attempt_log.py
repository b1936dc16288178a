"""Per-attempt log: JSON-lines files, ``{"ts", "stream", "line"}`` per line, rotated by size, paged by line offset.

Every attempt's log lies flat in one directory, ``<state>/attempts/<uid>.jsonl`` (rotated files
beside it: ``<uid>.jsonl.1`` ...), not in a directory of its own: on ext4 each new inode costs
tens to hundreds of microseconds of CPU, more than anything else in starting a short task.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, TypeVar

logger = logging.getLogger(__name__)

Stream = Literal["stdout", "stderr", "system"]

# A line longer than this is cut into several log lines (a process printing without newlines
# must not grow the worker's memory without bound).
MAX_LINE_BYTES = 64 * 1024
# What the worker keeps of one attempt's log, as kubelet keeps a container's: files of
# ``max_bytes / LOG_FILES`` (10 MiB), the oldest dropped when a sixth would start. The newest
# output, where the error is, always survives; the log shipper has normally sent the rotated files
# to the controller's log store long before they are dropped.
DEFAULT_MAX_LOG_BYTES = 50 * 1024 * 1024
LOG_FILES = 5
# A secret value shorter than this is not masked in logs (masking "1" would garble every line).
MIN_MASKED_SECRET = 4
MASK = "***"
# A new log that stays this small is also kept in memory until it is closed (``take_whole``): the
# log shipper then sends a short attempt's log without reading the file back.
SMALL_LOG_BYTES = 4096


LOG_SUFFIX = ".jsonl"

# A path as the caller holds it: the per-attempt paths of the runtime and the log shipper are plain
# ``str`` (a ``pathlib`` operation costs microseconds, several per attempt), others ``Path``.
AnyPath = TypeVar("AnyPath", str, Path)


def attempt_log_path(logs_dir: AnyPath, attempt_uid: str) -> AnyPath:
    """Where an attempt's (current) log file is (a ``str`` for a ``str`` directory)."""
    if isinstance(logs_dir, str):
        return f"{logs_dir}/{attempt_uid}{LOG_SUFFIX}"
    return logs_dir / (attempt_uid + LOG_SUFFIX)


def logged_attempt(file_name: str) -> str | None:
    """The attempt whose current log file has this name; None for any other file (a rotated one too)."""
    if file_name.endswith(LOG_SUFFIX) and len(file_name) > len(LOG_SUFFIX):
        return file_name[: -len(LOG_SUFFIX)]
    return None


def remove_log(path: str | Path, files: int = LOG_FILES) -> None:
    """Delete a log and its rotated files."""
    for older in rotated_paths(path, files):
        try:
            os.unlink(older)
        except FileNotFoundError:
            pass


def encode_line(ts: float, stream: str, text: str) -> bytes:
    """One stored log line: ``{"ts","stream","line"}`` with ``ts`` first (readers rely on it)."""
    return b'{"ts":%.6f,"stream":"%s","line":%s}\n' % (ts, stream.encode(), json.dumps(text).encode())


def rotated_paths(path: AnyPath, files: int = LOG_FILES) -> list[AnyPath]:
    """A log's files, oldest first: ``log.jsonl.4`` ... ``log.jsonl.1``, then ``log.jsonl``."""
    if isinstance(path, str):
        return [f"{path}.{k}" for k in range(files - 1, 0, -1)] + [path]
    return [path.with_name(f"{path.name}.{k}") for k in range(files - 1, 0, -1)] + [path]


_APPEND = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC


def mask_secrets(text: str, masks: Iterable[str]) -> str:
    """``text`` with each secret value (at least ``MIN_MASKED_SECRET`` long) replaced by ``***``."""
    for secret in sorted(masks, key=len, reverse=True):
        if len(secret) >= MIN_MASKED_SECRET and secret in text:
            text = text.replace(secret, MASK)
    return text


class AttemptLogWriter:
    """Turns raw pipe chunks into timestamped lines. Thread-safe: output and system events interleave.

    Writes go straight to an ``O_APPEND`` descriptor, one ``write`` per batch of lines (a buffered
    file object added a Python layer and a flush to every write, and there is nothing to buffer).
    A new (``exclusive``) log also keeps a copy of what it wrote while that is at most
    ``SMALL_LOG_BYTES`` and every write succeeded: the file's whole content, for ``take_whole``.
    """

    def __init__(
        self,
        path: str | Path,
        max_bytes: int = DEFAULT_MAX_LOG_BYTES,
        files: int = LOG_FILES,
        *,
        exclusive: bool = False,
        masks: Iterable[str] = (),
    ) -> None:
        """``exclusive``: a new file, FileExistsError if one is there (else appends to it).
        ``masks``: secret values written as ``***`` wherever a line holds them exactly."""
        self.path = path
        self.max_bytes = max_bytes
        self.files = max(1, files)
        self.file_bytes = max(1, max_bytes // self.files)
        self._fd = os.open(path, _APPEND | (os.O_EXCL if exclusive else 0), 0o666)
        self._written = 0 if exclusive else os.lseek(self._fd, 0, os.SEEK_END)
        self.rotations = 0
        self._partial: dict[str, bytes] = {"stdout": b"", "stderr": b""}
        # Complete lines of each stream to leave out (``skip_lines``): already in the log.
        self._skip: dict[str, int] | None = None
        self._lock = threading.Lock()
        self._write_failed = False
        self._copy: bytearray | None = bytearray() if exclusive else None
        # Longest first, so a secret containing another is masked whole.
        self._masks = sorted({m for m in masks if len(m) >= MIN_MASKED_SECRET}, key=len, reverse=True)

    def skip_lines(self, stdout: int, stderr: int) -> None:
        """Leave out the first ``stdout`` / ``stderr`` complete lines fed (a replayed output whose
        beginning this log holds already: an adopted container's)."""
        with self._lock:
            self._skip = {"stdout": stdout, "stderr": stderr}

    def feed(self, stream: Stream, data: bytes) -> None:
        ts = time.time()
        with self._lock:
            buf = self._partial[stream] + data
            *complete, rest = buf.split(b"\n")
            if self._skip is not None and self._skip[stream] > 0:
                left = self._skip[stream]
                self._skip[stream] = max(0, left - len(complete))
                complete = complete[left:]
            out = [self._encode_line(ts, stream, line) for line in complete]
            skipping = self._skip is not None and self._skip[stream] > 0
            while len(rest) > MAX_LINE_BYTES:
                if not skipping:
                    out.append(self._encode_line(ts, stream, rest[:MAX_LINE_BYTES]))
                rest = rest[MAX_LINE_BYTES:]
            self._partial[stream] = rest
            if out:
                self._write(b"".join(out))

    def end_stream(self, stream: Stream) -> None:
        """The pipe closed: a last line without a newline still counts."""
        with self._lock:
            rest = self._partial.get(stream, b"")
            self._partial[stream] = b""
            if rest:
                self._write(self._encode_line(time.time(), stream, rest))

    def system(self, text: str) -> None:
        with self._lock:
            self._write(encode_line(time.time(), "system", text))

    def _rotate(self) -> None:
        """``log.jsonl`` becomes ``log.jsonl.1`` (and so on down; the oldest file is dropped)."""
        fd, self._fd = self._fd, -1
        os.close(fd)
        paths = rotated_paths(self.path, self.files)
        for older, newer in zip(paths, paths[1:], strict=False):
            if os.path.exists(newer):
                os.replace(newer, older)
        self._fd = os.open(self.path, _APPEND, 0o666)
        self._written = 0
        self.rotations += 1
        self._copy = None

    def close(self) -> None:
        with self._lock:
            if self._fd >= 0:
                fd, self._fd = self._fd, -1
                os.close(fd)

    def take_whole(self) -> bytes | None:
        """The closed log's whole file content, if it stayed small (see the class); then forgets it."""
        with self._lock:
            if self._fd >= 0 or self._copy is None:
                return None
            whole, self._copy = bytes(self._copy), None
            return whole

    def _encode_line(self, ts: float, stream: str, raw: bytes) -> bytes:
        if raw.endswith(b"\r"):
            raw = raw[:-1]
        text = raw.decode("utf-8", errors="replace")
        for secret in self._masks:
            if secret in text:
                text = text.replace(secret, MASK)
        return encode_line(ts, stream, text)

    def _write(self, data: bytes) -> None:
        if self._fd < 0:
            return
        try:
            if self._written and self._written + len(data) > self.file_bytes:
                self._rotate()
            done = os.write(self._fd, data)
            while done < len(data):  # only when interrupted, or the disk filled up meanwhile
                done += os.write(self._fd, memoryview(data)[done:])
            self._written += len(data)
            if self._copy is not None:
                if len(self._copy) + len(data) <= SMALL_LOG_BYTES:
                    self._copy += data
                else:
                    self._copy = None
        except OSError as exc:  # e.g. disk full: the attempt goes on, the worker's health reports the disk
            self._copy = None  # part of it may be in the file: the copy is no longer the file
            if not self._write_failed:
                logger.warning("cannot write the log %s: %s", self.path, exc)
            self._write_failed = True


def count_output_lines(path: str | Path, files: int = LOG_FILES) -> tuple[int, int]:
    """(stdout, stderr) lines of the task's output in an attempt's log (rotated files included):
    how much of the output a restarted worker must not log again. A piece of a line cut at
    ``MAX_LINE_BYTES`` does not count (only the line's last piece ends a line)."""
    counts = {"stdout": 0, "stderr": 0}
    for name in rotated_paths(path, files):
        try:
            f = open(name, "rb")  # noqa: SIM115
        except FileNotFoundError:
            continue
        with f:
            for raw in f:
                if not raw.endswith(b"\n"):
                    break  # torn by a crash: never read as a line
                try:
                    entry = json.loads(raw)
                except ValueError:
                    continue
                stream = entry.get("stream")
                if stream in counts and len(entry.get("line", "").encode()) != MAX_LINE_BYTES:
                    counts[stream] += 1
    return counts["stdout"], counts["stderr"]


@dataclass(frozen=True, slots=True)
class LogPage:
    lines: list[dict]
    next_offset: int
    # No complete line exists past next_offset (at the time of reading).
    at_end: bool


class LineIndex:
    """Byte offsets of every ``stride``-th line of one log, learnt while reading it.

    Following a long log (``logs -f``) then seeks close to the wanted line instead of rescanning
    the file from the top on every poll.
    """

    def __init__(self, stride: int = 1024) -> None:
        self.stride = stride
        # checkpoints[k] is the byte offset where line k*stride starts.
        self.checkpoints: list[int] = [0]
        self._lock = threading.Lock()

    def seek_point(self, line: int) -> tuple[int, int]:
        """(line number, byte offset) of the closest known line at or before ``line``."""
        with self._lock:
            k = min(line // self.stride, len(self.checkpoints) - 1)
            return k * self.stride, self.checkpoints[k]

    def learn(self, line: int, byte_offset: int) -> None:
        if line % self.stride:
            return
        with self._lock:
            if line // self.stride == len(self.checkpoints):
                self.checkpoints.append(byte_offset)


def read_log_page(path: str | Path, offset: int, limit: int, index: LineIndex | None = None) -> LogPage:
    """Lines [offset, offset+limit) of a log; a trailing half-written line is never returned."""
    index = index or LineIndex()
    line, position = index.seek_point(offset)
    lines: list[dict] = []
    at_end = True
    try:
        f = open(path, "rb")  # noqa: SIM115
    except FileNotFoundError:
        return LogPage([], offset, True)
    with f:
        f.seek(position)
        for raw in f:
            if not raw.endswith(b"\n"):
                break
            if line >= offset:
                if len(lines) >= limit:
                    at_end = False
                    break
                lines.append(json.loads(raw))
            position += len(raw)
            line += 1
            index.learn(line, position)
    return LogPage(lines, offset + len(lines), at_end)
