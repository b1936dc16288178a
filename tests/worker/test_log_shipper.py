"""The worker's log shipper against a real log store behind real HTTP: rotated logs arrive whole,
in order, once; output rotated away while the controller was unreachable is marked, not hidden."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from iris.cluster.controller.logstore import LogStore
from iris.cluster.runtime.attempt_log import AttemptLogWriter, attempt_log_path, encode_line, rotated_paths
from iris.cluster.worker.log_shipper import ROTATED_AWAY, LogShipper
from iris.rpc.log_models import LogPushRequest

UID = "a1b2c3"


class StoreServer:
    """``POST /api/v1/logs:push`` served by a LogStore; ``available = False`` answers 503."""

    def __init__(self, root: Path) -> None:
        self.store = LogStore(root)
        self.available = True
        self.refused = 0  # pushes answered 503
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["content-length"]))
                if not server.available:
                    server.refused += 1
                    self.send_response(503)
                    self.send_header("content-length", "0")
                    self.end_headers()
                    return
                answer = server.store.push(
                    LogPushRequest.model_validate_json(body),
                    lambda uids: dict.fromkeys(uids, ("/user/job/0", 0)),
                ).model_dump_json()
                data = answer.encode()
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.http.server_address[1]}"
        self.thread = threading.Thread(target=self.http.serve_forever, daemon=True)
        self.thread.start()

    def lines(self) -> list[str]:
        return [json.loads(raw.raw)["line"] for raw in self.store.segment(UID).iter_all()]

    def close(self) -> None:
        self.http.shutdown()
        self.http.server_close()
        self.store.close()


@pytest.fixture
def server(tmp_path: Path) -> Iterator[StoreServer]:
    s = StoreServer(tmp_path / "store")
    yield s
    s.close()


def wait_until(check: Callable[[], bool], timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.02)


def shipper(server: StoreServer, attempts_dir: Path, ended: dict[str, bool]) -> LogShipper:
    return LogShipper(
        server.url, "w1", attempts_dir, lambda _mark: (0, dict(ended)), interval_s=0.02, max_push_bytes=4096
    )


def attempt_log(tmp_path: Path, max_bytes: int) -> tuple[Path, AttemptLogWriter]:
    """The runtime's attempts dir with one attempt's log, rotated over 5 files of max_bytes / 5."""
    attempts = tmp_path / "attempts"
    attempts.mkdir(parents=True)
    return attempts, AttemptLogWriter(attempt_log_path(attempts, UID), max_bytes=max_bytes, files=5)


def write(log: AttemptLogWriter, first: int, count: int) -> None:
    for i in range(first, first + count):
        log.feed("stdout", f"line {i:05d} padded to be a little longer\n".encode())


def test_a_log_that_rotated_before_it_was_shipped_arrives_whole_and_in_order(
    server: StoreServer, tmp_path: Path
) -> None:
    attempts, log = attempt_log(tmp_path, max_bytes=40_000)
    write(log, 0, 300)  # ~27 KB: four files, none dropped yet
    assert log.rotations >= 3
    ended = {UID: False}
    s = shipper(server, attempts, ended)
    s.start()
    try:
        write(log, 300, 50)  # more while it ships (still five files at most)
        log.close()
        ended[UID] = True
        wait_until(lambda: s.backlog() == 0)
    finally:
        s.stop()
    assert server.lines() == [f"line {i:05d} padded to be a little longer" for i in range(350)]


def test_a_rotation_between_choosing_a_file_and_opening_it_skips_nothing(
    server: StoreServer, tmp_path: Path
) -> None:
    """The shipper picks the oldest file by name; if the log rotates before it opens that name, the
    name holds the next newer file: it must choose again, not skip the oldest one's lines."""
    attempts, log = attempt_log(tmp_path, max_bytes=40_000)
    write(log, 0, 300)  # three rotations: four files
    rotations = log.rotations

    class RotatingWhileLocating(LogShipper):
        rotated = False

        def _locate(self, cursor):  # type: ignore[no-untyped-def]
            chosen = super()._locate(cursor)
            if not self.rotated:  # once: the writer rotates right after the choice
                self.rotated = True
                write(log, 300, 86)
            return chosen

    ended = {UID: False}
    s = RotatingWhileLocating(
        server.url, "w1", attempts, lambda _mark: (0, dict(ended)), interval_s=0.02, max_push_bytes=4096
    )
    s.start()
    try:
        wait_until(lambda: s.rotated)
        log.close()
        ended[UID] = True
        wait_until(lambda: s.backlog() == 0)
    finally:
        s.stop()
    assert log.rotations == rotations + 1
    assert server.lines() == [f"line {i:05d} padded to be a little longer" for i in range(386)]


def ship_through_an_outage(server: StoreServer, tmp_path: Path, *, refused_pushes: int = 0) -> list[str]:
    """20 lines shipped, then 2,000 more (~160 KB: eight times what the worker keeps) written while
    the controller answers 503; after ``refused_pushes`` pushes refused since, the attempt ends
    and the controller comes back. Returns the lines the store holds once the shipper is done."""
    attempts, log = attempt_log(tmp_path, max_bytes=20_000)
    ended = {UID: False}
    s = shipper(server, attempts, ended)
    s.start()
    try:
        write(log, 0, 20)
        wait_until(lambda: len(server.lines()) == 20)
        server.available = False
        write(log, 20, 2000)
        refused = server.refused
        wait_until(lambda: server.refused >= refused + refused_pushes)  # pushes made after the loss
        log.close()
        ended[UID] = True
        server.available = True
        wait_until(lambda: s.backlog() == 0)
    finally:
        s.stop()
    kept = sum(p.stat().st_size for p in rotated_paths(attempt_log_path(attempts, UID)) if p.exists())
    assert kept <= 20_000
    return server.lines()


def test_output_rotated_away_while_the_controller_was_away_is_marked_and_the_rest_arrives(
    server: StoreServer, tmp_path: Path
) -> None:
    lines = ship_through_an_outage(server, tmp_path)
    assert lines[:20] == [f"line {i:05d} padded to be a little longer" for i in range(20)]
    assert lines[20] == ROTATED_AWAY
    rest = [int(line.split()[1]) for line in lines[21:]]
    # What the worker still held: contiguous, up to the very last line, nothing twice.
    assert rest == list(range(rest[0], 2020)) and rest[0] > 20


def test_the_rotated_away_marker_outlives_a_failed_push_that_carried_it(
    server: StoreServer, tmp_path: Path
) -> None:
    """The shipper notices the loss while the controller is still away: the push carrying the
    marker fails, and the marker still arrives (once) with the next push that gets through."""
    lines = ship_through_an_outage(server, tmp_path, refused_pushes=2)
    assert lines[:20] == [f"line {i:05d} padded to be a little longer" for i in range(20)]
    assert lines[20] == ROTATED_AWAY and lines.count(ROTATED_AWAY) == 1
    rest = [int(line.split()[1]) for line in lines[21:]]
    assert rest == list(range(rest[0], 2020)) and rest[0] > 20


def test_a_restarted_shipper_resumes_a_rotated_log_where_the_store_stopped(
    server: StoreServer, tmp_path: Path
) -> None:
    attempts, log = attempt_log(tmp_path, max_bytes=60_000)
    ended = {UID: False}
    first = shipper(server, attempts, ended)
    first.start()
    write(log, 0, 100)
    wait_until(lambda: len(server.lines()) == 100)
    first.stop()
    write(log, 100, 300)  # rotates while no shipper runs
    log.close()
    assert log.rotations >= 2
    second = shipper(server, attempts, {})  # a new daemon adopts what is on disk
    second.start()
    try:
        wait_until(lambda: second.backlog() == 0)
    finally:
        second.stop()
    assert server.lines() == [f"line {i:05d} padded to be a little longer" for i in range(400)]


def test_the_shipper_learns_of_attempts_from_the_changes_since_its_last_mark(
    server: StoreServer, tmp_path: Path
) -> None:
    """Each attempt is named once when its log is made and once when it ends: nothing is lost between."""
    attempts, log = attempt_log(tmp_path, max_bytes=60_000)
    write(log, 0, 10)
    feed = [(1, {UID: False})]  # what the runtime answers next, in order; then nothing new
    marks: list[int] = []

    def changes(mark: int) -> tuple[int, dict[str, bool]]:
        marks.append(mark)
        return feed.pop(0) if feed else (mark, {})

    s = LogShipper(server.url, "w1", attempts, changes, interval_s=0.02, max_push_bytes=4096)
    s.start()
    try:
        wait_until(lambda: len(server.lines()) == 10)
        assert s.backlog() == 1  # running: shipped so far, not final
        write(log, 10, 5)
        log.close()
        feed.append((2, {UID: True}))
        wait_until(lambda: s.backlog() == 0 and 2 in marks)
    finally:
        s.stop()
    assert server.lines() == [f"line {i:05d} padded to be a little longer" for i in range(15)]
    assert marks[0] == 0 and set(marks) == {0, 1, 2} and marks == sorted(marks)


def test_an_ended_attempts_log_handed_over_in_memory_is_shipped_without_reading_its_file(
    server: StoreServer, tmp_path: Path
) -> None:
    attempts = tmp_path / "attempts"
    attempts.mkdir()
    lines = [f"line {i:05d} padded to be a little longer" for i in range(3)]
    whole = b"".join(encode_line(1.0, "stdout", line) for line in lines)
    handed: list[str] = []

    def finished_log(uid: str) -> bytes | None:
        handed.append(uid)
        return whole

    # No file at all: the lines can only come from the content handed over.
    s = LogShipper(
        server.url,
        "w1",
        attempts,
        lambda _mark: (0, {UID: True}),
        finished_log=finished_log,
        interval_s=0.02,
        max_push_bytes=4096,
    )
    s.start()
    try:
        wait_until(lambda: s.backlog() == 0)
    finally:
        s.stop()
    assert server.lines() == lines and handed == [UID]


def test_without_the_content_in_memory_the_file_is_read(server: StoreServer, tmp_path: Path) -> None:
    attempts, log = attempt_log(tmp_path, max_bytes=60_000)
    write(log, 0, 5)
    log.close()
    s = LogShipper(
        server.url,
        "w1",
        attempts,
        lambda _mark: (0, {UID: True}),
        finished_log=lambda _uid: None,
        interval_s=0.02,
        max_push_bytes=4096,
    )
    s.start()
    try:
        wait_until(lambda: s.backlog() == 0)
    finally:
        s.stop()
    assert server.lines() == [f"line {i:05d} padded to be a little longer" for i in range(5)]
