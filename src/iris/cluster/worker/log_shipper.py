"""Ships every attempt's log to the controller's log store as it is written.

The runtime writes each attempt's log to ``<state>/attempts/<uid>.jsonl`` (rotated by size); this thread reads
what is new and pushes it (several attempts per request, at most ``max_push_bytes`` each), one
request in flight. The file is the buffer: a chatty task never waits for the controller, and a
slow or absent controller only makes the next push larger (up to the bound) or later.

Lines are numbered per attempt; the controller answers how many it holds, and a shipper that
lost its place (either side restarted) rewinds or skips to that line. An attempt is done once it
has ended and the controller has acknowledged its last line as final.

Each cycle costs per attempt being shipped, not per attempt the worker remembers: the runtime
tells which attempts got a log or ended since the previous cycle, paths are plain strings, and a
log with nothing new costs one ``stat``.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from iris.cluster.runtime.attempt_log import attempt_log_path, encode_line, logged_attempt, rotated_paths
from iris.rpc.errors import IrisError
from iris.rpc.http import HttpClient
from iris.rpc.log_models import AttemptUsage, LogChunk, LogPushRequest, LogPushResponse

logger = logging.getLogger(__name__)

HTTP_TIMEOUT_S = 10.0
_BACKOFF_MAX_S = 5.0
_USAGE_EVERY_S = 2.0
_HEAD_BYTES = 40
_O_RDONLY = os.O_RDONLY | os.O_CLOEXEC
ROTATED_AWAY = (
    "output missing here: the worker's log rotation dropped it before it could be sent to the controller"
)


@dataclass(slots=True)
class _Cursor:
    uid: str
    path: str
    next_line: int = 0
    byte_pos: int = 0
    inode: int = 0
    # The first bytes of that file: with the inode, tell it from a newer file given a freed inode.
    head: bytes = b""
    # Adopted from a previous run: ask the controller how far it got before sending.
    probe: bool = False
    ended: bool = False
    usage_sent_at: float = 0.0
    # Output was rotated away before it was read: the marker line leads every push until one is
    # acknowledged (a push that failed must not take the marker with it).
    lost_output: bool = False


_LOCATE_TRIES = 8


def _inode_of(path: str) -> int:
    """The inode of ``path``; 0 when there is no such file."""
    try:
        return os.stat(path).st_ino
    except FileNotFoundError:
        return 0


def _relocated(cursor: _Cursor) -> _Cursor:
    """Forget which file the cursor is in (its next read starts a file from its first byte)."""
    cursor.inode, cursor.head, cursor.byte_pos = 0, b"", 0
    return cursor


class LogShipper:
    def __init__(
        self,
        controller_url: str,
        worker_id: str,
        attempts_dir: str | Path,
        attempts: Callable[[int], tuple[int, Mapping[str, bool]]],
        *,
        usage: Callable[[str], AttemptUsage | None] | None = None,
        finished_log: Callable[[str], bytes | None] | None = None,
        token: str | None = None,
        interval_s: float = 0.05,
        max_push_bytes: int = 256 * 1024,
    ) -> None:
        self._controller_url = controller_url.rstrip("/")
        self._token = token
        self._worker_id = worker_id
        """``attempts(mark)`` answers (a new mark, attempt uid -> whether it has ended) for every
        attempt whose log was made or that ended after ``mark``, every attempt known for mark 0
        (``SubprocessRuntime.attempts_changed_since``); the next call passes the new mark.
        ``finished_log(uid)`` may hand over an ended attempt's whole log file content
        (``SubprocessRuntime.take_finished_log``): an attempt shipped from its first line then
        costs no file read."""
        self._dir = os.fspath(attempts_dir)
        self._attempts = attempts
        self._mark = 0
        self._usage = usage
        self._finished_log = finished_log
        self._interval_s = interval_s
        self._max_push_bytes = max_push_bytes
        self._cursors: dict[str, _Cursor] = {}
        self._done: set[str] = set()
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="iris-log-shipper", daemon=True)
        self.pushes = 0
        self.lines_shipped = 0
        # The last push got an answer: worth waiting for at shutdown.
        self._reachable = False

    def start(self) -> None:
        self._adopt_previous()
        self._thread.start()

    def stop(self, flush_s: float = 2.0) -> None:
        """Stop after a last effort (at most ``flush_s``) to ship what is left."""
        deadline = time.monotonic() + flush_s
        while time.monotonic() < deadline and self._thread.is_alive() and self.backlog() and self._reachable:
            self._wake.set()
            time.sleep(0.05)
        self._stop.set()
        self._wake.set()
        if self._thread.ident is not None:
            self._thread.join(timeout=HTTP_TIMEOUT_S)

    def wake(self) -> None:
        self._wake.set()

    def backlog(self) -> int:
        """Attempts not yet shipped to the end (approximate, for tests and shutdown)."""
        return len(self._cursors)

    # ------------------------------------------------------------------ loop

    def _adopt_previous(self) -> None:
        try:
            names = os.listdir(self._dir)
        except FileNotFoundError:
            return
        for name in names:
            uid = logged_attempt(name)
            if uid is not None:
                self._cursors[uid] = _Cursor(uid, f"{self._dir}/{name}", probe=True, ended=True)

    def _loop(self) -> None:
        backoff = self._interval_s
        with HttpClient(self._controller_url, token=self._token, timeout_s=HTTP_TIMEOUT_S) as client:
            while not self._stop.is_set():
                try:
                    more = self._cycle(client)
                    backoff = self._interval_s
                except (IrisError, ValueError) as exc:
                    logger.debug("log push failed: %s", exc)
                    self._reachable = False
                    more = False
                    backoff = min(_BACKOFF_MAX_S, max(backoff * 2, 0.1))
                except Exception:
                    logger.exception("log shipping failed")
                    more = False
                    backoff = min(_BACKOFF_MAX_S, max(backoff * 2, 0.1))
                if not more:
                    self._wake.wait(backoff)
                    self._wake.clear()

    def _cycle(self, client: HttpClient) -> bool:
        """One push of whatever is new; True if more is waiting right away."""
        self._discover()
        chunks: list[LogChunk] = []
        sizes: dict[str, tuple[int, int]] = {}  # uid -> (lines, bytes) in this push
        budget = self._max_push_bytes
        more = False
        now = time.monotonic()
        for cursor in list(self._cursors.values()):
            if cursor.probe:
                chunks.append(LogChunk(attempt_uid=cursor.uid, first_line=0, data=""))
                sizes[cursor.uid] = (0, 0)
                continue
            if budget <= 0:
                data, lines, used, complete = b"", 0, 0, False
                more = True
            else:
                data, lines, used, complete = self._from_memory(cursor, budget) or self._read_new(
                    cursor, budget
                )
            usage = None
            if self._usage is not None and (cursor.ended or now - cursor.usage_sent_at >= _USAGE_EVERY_S):
                usage = self._usage(cursor.uid)
            final = cursor.ended and complete
            if not lines and not final and usage is None:
                continue
            if usage is not None:
                cursor.usage_sent_at = now
            budget -= len(data)
            more = more or not complete
            chunks.append(
                LogChunk(
                    attempt_uid=cursor.uid,
                    first_line=cursor.next_line,
                    data=data.decode("utf-8", "replace"),
                    final=final,
                    usage=usage,
                )
            )
            sizes[cursor.uid] = (lines, used)
        if not chunks:
            return False
        answer = client.request(
            "POST", "/api/v1/logs:push", json_body=LogPushRequest(worker_id=self._worker_id, chunks=chunks)
        )
        self.pushes += 1
        self._reachable = True
        acks = LogPushResponse.model_validate(answer).acks
        for chunk in chunks:
            cursor = self._cursors.get(chunk.attempt_uid)
            ack = acks.get(chunk.attempt_uid)
            if cursor is None or ack is None:
                continue
            lines, size = sizes[chunk.attempt_uid]
            if ack.lines < 0 or (ack.final and cursor.ended):
                self._finish(cursor)
                continue
            if not cursor.probe and ack.lines == chunk.first_line + lines:
                cursor.next_line += lines
                cursor.byte_pos += size
                self.lines_shipped += lines
                cursor.lost_output = cursor.lost_output and not lines
            else:
                self._seek(cursor, ack.lines)
                more = True
            cursor.probe = False
        return more

    def _discover(self) -> None:
        self._mark, changed = self._attempts(self._mark)
        for uid, ended in changed.items():
            cursor = self._cursors.get(uid)
            if cursor is None:
                if uid in self._done:
                    continue
                path = attempt_log_path(self._dir, uid)
                cursor = self._cursors[uid] = _Cursor(uid, path)
            # The runtime's word wins over a guess: an attempt adopted from disk at start-up is
            # taken as ended until the runtime says it still runs (its log then keeps growing).
            cursor.ended = ended

    def _finish(self, cursor: _Cursor) -> None:
        self._cursors.pop(cursor.uid, None)
        self._done.add(cursor.uid)
        if len(self._done) > 100_000:
            self._done.clear()  # the runtime forgets old attempts long before this

    def _from_memory(self, cursor: _Cursor, budget: int) -> tuple[bytes, int, int, bool] | None:
        """``_read_new``'s answer for an ended attempt nothing of which was read yet, from the log
        content the runtime kept (the file's whole content: written, closed, never rotated)."""
        if (
            self._finished_log is None
            or not cursor.ended
            or cursor.inode
            or cursor.byte_pos
            or cursor.next_line
        ):
            return None
        whole = self._finished_log(cursor.uid)
        if whole is None or len(whole) > budget or not whole.endswith(b"\n"):
            return None  # read the file instead (it holds the same bytes)
        return whole, whole.count(b"\n"), len(whole), True

    def _read_new(
        self, cursor: _Cursor, budget: int, *, locate: bool = False
    ) -> tuple[bytes, int, int, bool]:
        """(lines to send, how many, file bytes they take, whether that reaches the end of the log).

        The runtime rotates a long log (``<uid>.jsonl`` -> ``<uid>.jsonl.1`` ...): a rotated file the
        cursor is in is read to its end before the next one. If it was dropped before it could be
        sent (the controller was away that long), the log goes on from the oldest file left, after
        one line saying output is missing.
        """
        current = False
        if cursor.inode:  # a file read before (a new cursor's inode is 0: it has to be located)
            try:
                quick = os.stat(cursor.path)
            except FileNotFoundError:
                return b"", 0, 0, True
            if quick.st_ino == cursor.inode and quick.st_size == cursor.byte_pos and not cursor.lost_output:
                return b"", 0, 0, True  # nothing new (the common case: no need to open the file)
            current = not locate and quick.st_ino == cursor.inode and quick.st_size > cursor.byte_pos
        if current:
            path, lost = cursor.path, False
            try:
                fd = os.open(path, _O_RDONLY)
            except FileNotFoundError:
                return b"", 0, 0, False
        else:
            located = self._locate_and_open(cursor)
            if located is None:
                return b"", 0, 0, False
            path, lost, fd = located
            if fd < 0:
                # A new attempt's log not made yet reads as complete and empty, as before it is found.
                return b"", 0, 0, not cursor.inode and path == cursor.path
        try:
            stat = os.fstat(fd)
            if current and os.pread(fd, len(cursor.head), 0) != cursor.head:
                # Not the file the cursor was in: a new one that got its (freed) inode number.
                return self._read_new(cursor, budget, locate=True)
            cursor.lost_output = cursor.lost_output or lost
            prefix = encode_line(time.time(), "system", ROTATED_AWAY) if cursor.lost_output else b""
            if cursor.inode != stat.st_ino:
                cursor.inode, cursor.head = stat.st_ino, b""
            data = b""
            if stat.st_size > cursor.byte_pos:
                data = os.pread(fd, min(budget, stat.st_size - cursor.byte_pos), cursor.byte_pos)
            if len(cursor.head) < _HEAD_BYTES:
                # Read from the start, the data holds the head: no second read.
                head_in_data = cursor.byte_pos == 0 and len(data) >= _HEAD_BYTES
                cursor.head = data[:_HEAD_BYTES] if head_in_data else os.pread(fd, _HEAD_BYTES, 0)
        finally:
            os.close(fd)
        cut = data.rfind(b"\n") + 1
        data = data[:cut]
        # A half-written last line (no newline yet) waits for the next cycle.
        reached_end = path == cursor.path and cursor.byte_pos + cut >= stat.st_size
        return prefix + data, prefix.count(b"\n") + data.count(b"\n"), len(data), reached_end

    def _locate_and_open(self, cursor: _Cursor) -> tuple[str, bool, int] | None:
        """(path, output lost, open fd or -1 when there is no such file) of the file to read next;
        None when the log kept rotating while it was chosen (the next cycle tries again).

        A rotation between choosing a file by name and opening it shifts every name by one, so the
        name would open the next newer file and skip one. Each rotation gives the current log a new
        inode (the old one lives on as ``.1``): when it changed meanwhile, the choice is made again
        from the cursor as it was."""
        saved = (cursor.inode, cursor.head, cursor.byte_pos)
        for _ in range(_LOCATE_TRIES):
            mark = _inode_of(cursor.path)
            path, lost = self._locate(cursor)
            try:
                fd = os.open(path, _O_RDONLY)
            except FileNotFoundError:
                fd = -1
            if _inode_of(cursor.path) == mark:
                return path, lost, fd
            if fd >= 0:
                os.close(fd)
            cursor.inode, cursor.head, cursor.byte_pos = saved
        return None  # rotating faster than it can be read: the next cycle tries again

    def _is_cursors_file(self, path: str, cursor: _Cursor) -> int | None:
        """The size of ``path`` if it is the file the cursor is in (inode and first bytes agree)."""
        try:
            fd = os.open(path, _O_RDONLY)
        except FileNotFoundError:
            return None
        try:
            stat = os.fstat(fd)
            if stat.st_ino != cursor.inode or os.pread(fd, len(cursor.head), 0) != cursor.head:
                return None
            return stat.st_size
        finally:
            os.close(fd)

    def _locate(self, cursor: _Cursor) -> tuple[str, bool]:
        """(the file to read next, whether output was dropped before it could be read)."""
        if not cursor.inode:
            return self._oldest_file(cursor), False  # a log first seen after it rotated: from its start
        files = rotated_paths(cursor.path)
        for k, path in enumerate(files):
            size = self._is_cursors_file(path, cursor)
            if size is None:
                continue
            if path == cursor.path or cursor.byte_pos < size:
                return path, False
            # Read to its end (a rotated file never grows): the next newer file, from its start.
            newer = next((p for p in files[k + 1 :] if os.path.exists(p)), cursor.path)
            _relocated(cursor)
            return newer, False
        _relocated(cursor)
        return self._oldest_file(cursor), True

    def _oldest_file(self, cursor: _Cursor) -> str:
        # Rotation always leaves a ``.1``: without one the log has never rotated (most logs; this
        # runs for every new attempt, so it stats one name, not all of them).
        if not os.path.exists(f"{cursor.path}.1"):
            return cursor.path
        return next((path for path in rotated_paths(cursor.path) if os.path.exists(path)), cursor.path)

    def _seek(self, cursor: _Cursor, line: int) -> None:
        """Put the cursor at line ``line`` of the log (counting from the start of its oldest file)."""
        number = 0
        files = [p for p in rotated_paths(cursor.path) if os.path.exists(p)] or [cursor.path]
        for k, path in enumerate(files):
            position = 0
            try:
                with open(path, "rb") as f:
                    inode = os.fstat(f.fileno()).st_ino
                    while number < line:
                        block = f.read(1 << 20)
                        if not block:
                            break
                        count = block.count(b"\n")
                        if number + count < line:
                            number += count
                            position += len(block)
                            continue
                        index = -1
                        for _ in range(line - number):
                            index = block.index(b"\n", index + 1)
                        position += index + 1
                        number = line
            except FileNotFoundError:
                continue
            if number >= line or k == len(files) - 1:
                cursor.next_line, cursor.byte_pos, cursor.inode = number, position, inode
                return
        cursor.next_line, cursor.byte_pos, cursor.inode = number, 0, 0
