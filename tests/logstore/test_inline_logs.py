"""Small logs kept inline in the log store's index: the same answers as logs in files, the move to
a file at the bound, crashes around that move, stores written before inline logs, and retention."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import threading
from collections.abc import Sequence
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from iris.cluster.controller.logstore import LogQuery, LogStore, run_query
from iris.cluster.controller.logstore.index import SCHEMA_VERSION
from iris.cluster.controller.logstore.segment import STRIDE, InlineLog, LogData, Segment
from iris.rpc.errors import InsufficientStorage, InvalidArgument
from iris.rpc.log_models import LogChunk, LogPushRequest

OWNERS = {"a1": ("/u/job/0", 0), "b1": ("/u/job/1", 0), "c1": ("/u/job/2", 0)}
SRC = Path(__file__).resolve().parents[2] / "src"


def resolve(uids: Sequence[str]) -> dict[str, tuple[str, int]]:
    return {uid: OWNERS[uid] for uid in uids if uid in OWNERS}


def line(n: int, *, width: int = 0) -> bytes:
    """Line ``n`` of a test log: the same bytes whenever it is sent again (as a worker resends)."""
    text = f"line {n} " + "x" * (width or (n * 7) % 40)
    # Not always rising: a log's last_ts is the latest time it holds, not its last line's.
    return json.dumps({"ts": 1000.0 + n * 0.5 + (n % 3) * 0.7, "stream": "stdout", "line": text}).encode()


def data(start: int, stop: int, **kw: int) -> str:
    return "".join((line(n, **kw) + b"\n").decode() for n in range(start, stop))


def push(store: LogStore, uid: str, first: int, text: str, *, final: bool = False) -> int:
    chunk = LogChunk(attempt_uid=uid, first_line=first, data=text, final=final)
    return store.push(LogPushRequest(worker_id="w", chunks=[chunk]), resolve).acks[uid].lines


def texts(log: LogData) -> list[str]:
    return [json.loads(r.raw)["line"] for r in log.iter_all()]


def inline_rows(store: LogStore, uid: str) -> int:
    conn = sqlite3.connect(store.root / "index.sqlite3")
    try:
        return conn.execute("SELECT COUNT(*) FROM log_inline WHERE attempt_uid = ?", (uid,)).fetchone()[0]
    finally:
        conn.close()


def data_file(store: LogStore, uid: str) -> Path:
    return store.root / uid[:2] / f"{uid}.jsonl"


def reads(store: LogStore, uid: str) -> dict[str, object]:
    """Everything a reader can ask of one attempt's log, and of the job it belongs to."""
    log = store.segment(uid)
    n = log.lines
    out: dict[str, object] = {
        "lines": n,
        "all": [(r.offset, r.raw) for r in log.iter_all()],
        "from": [[(r.offset, r.raw) for r in log.iter_all(k)] for k in (1, n // 2, n, n + 3)],
        "read": [
            [(r.offset, r.raw) for r in log.read(s, k)]
            for s in (0, 1, n // 3, n - 1, n)
            for k in (1, 4, 1000)
        ],
        "tail": [[(r.offset, r.raw) for r in log.tail(k)] for k in (0, 1, 3, n, n + 5)],
        "before": [
            [(r.offset, r.raw) for r in log.tail(k, b)] for k in (1, 2, 50) for b in (0, 1, n // 2, n, n + 2)
        ],
        "at_time": [log.line_at_time(t) for t in (0.0, 1000.0, 1000.0 + n / 4, 1e12)],
    }
    row = store.attempt(uid)
    if row is not None:
        out["row"] = (row.lines, row.bytes, row.first_ts, row.last_ts, row.final)
        attempts = [a for a in store.attempts_of_job("/u/job") if a.attempt_uid == uid]
        for name, query in {
            "q_tail": LogQuery(tail=3),
            "q_grep": LogQuery(grep=r"line \d*[05] "),
            "q_since": LogQuery(since=1000.0 + n / 4),
            "q_page": LogQuery(limit=2),
            "q_follow": LogQuery(after={uid: n // 2}),
        }.items():
            result = run_query(store, attempts, query)
            out[name] = ([(x.offset, x.ts, x.line) for x in result.lines], result.cursor, result.truncated)
    return out


# ---------------------------------------------------------------------------- same answers


push_op = st.tuples(
    st.sampled_from(["a1", "b1"]),
    st.integers(min_value=-6, max_value=2),  # first line, relative to what is stored: resend .. gap
    st.integers(min_value=0, max_value=9),  # lines in the chunk
    st.booleans(),  # final
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
# A log moved to its file by the second chunk of a push keeps the latest time of the first.
@example(ops=[[("a1", 0, 4, False)], [("a1", 0, 5, False), ("a1", 0, 6, False)]])
@given(ops=st.lists(st.lists(push_op, min_size=1, max_size=3), min_size=1, max_size=14))
def test_inline_spilled_and_file_logs_answer_alike(tmp_path_factory: pytest.TempPathFactory, ops) -> None:
    """Any sequence of pushes (resends, gaps, probes, finals, several chunks a request) gets the
    same acks and leaves the same reads whether each log stays inline, moves to its file on the
    way, or is in its file from the first line; and again after a restart."""
    root = tmp_path_factory.mktemp("stores")
    bounds = {"inline": (10**9, STRIDE), "spills": (700, 9), "file": (0, 0)}
    stores = {
        name: LogStore(root / name, inline_max_bytes=b, inline_max_lines=n) for name, (b, n) in bounds.items()
    }
    held = {"a1": 0, "b1": 0}
    try:
        for request in ops:
            chunks = []
            for uid, delta, count, final in request:
                first = max(0, held[uid] + delta)
                chunks.append(
                    LogChunk(attempt_uid=uid, first_line=first, data=data(first, first + count), final=final)
                )
            answers = {
                name: s.push(LogPushRequest(worker_id="w", chunks=chunks), resolve).acks
                for name, s in stores.items()
            }
            assert answers["inline"] == answers["spills"] == answers["file"]
            for uid, ack in answers["file"].items():
                held[uid] = ack.lines
        for uid in held:
            expected = reads(stores["file"], uid)
            assert reads(stores["inline"], uid) == expected
            assert reads(stores["spills"], uid) == expected
        assert isinstance(stores["file"].segment("a1"), Segment) or held["a1"] == 0
        for name in stores:
            stores[name].close()
            stores[name] = LogStore(
                root / name, inline_max_bytes=bounds[name][0], inline_max_lines=bounds[name][1]
            )
        for uid in held:
            expected = reads(stores["file"], uid)
            assert reads(stores["inline"], uid) == expected
            assert reads(stores["spills"], uid) == expected
    finally:
        for s in stores.values():
            s.close()


# ---------------------------------------------------------------------------- the bound


def test_a_log_stays_inline_up_to_the_byte_bound_and_moves_to_its_file_past_it(tmp_path: Path) -> None:
    first = data(0, 10)
    bound = len(first) + len(data(10, 11))
    store = LogStore(tmp_path / "logs", inline_max_bytes=bound)
    assert push(store, "a1", 0, first) == 10
    assert push(store, "a1", 10, data(10, 11)) == 11  # exactly the bound: still inline
    row = store.attempt("a1")
    assert row is not None and row.inline and row.bytes == bound
    assert isinstance(store.segment("a1"), InlineLog) and not data_file(store, "a1").exists()
    assert inline_rows(store, "a1") == 2  # one row a push: an append never rewrites what is stored

    assert push(store, "a1", 9, data(9, 13)) == 13  # one byte past it (a resend of 9-10 included)
    row = store.attempt("a1")
    assert row is not None and not row.inline and row.lines == 13 and row.bytes == bound + len(data(11, 13))
    log = store.segment("a1")
    assert isinstance(log, Segment)
    assert data_file(store, "a1").read_bytes() == data(0, 13).encode()
    assert inline_rows(store, "a1") == 0
    assert texts(log) == [json.loads(line(n))["line"] for n in range(13)]
    assert push(store, "a1", 13, data(13, 15)) == 15  # later lines go to the file
    assert data_file(store, "a1").read_bytes() == data(0, 15).encode()


def test_a_log_moves_to_its_file_at_the_line_bound(tmp_path: Path) -> None:
    store = LogStore(tmp_path / "logs", inline_max_bytes=10**6)  # the default line bound: STRIDE
    assert push(store, "a1", 0, data(0, STRIDE, width=1)) == STRIDE
    assert isinstance(store.segment("a1"), InlineLog)
    assert push(store, "a1", STRIDE, data(STRIDE, STRIDE + 1, width=1)) == STRIDE + 1
    log = store.segment("a1")
    assert isinstance(log, Segment) and log.index_path.stat().st_size == 2 * 16  # checkpoints 0 and 1
    assert [r.offset for r in log.read(STRIDE - 1, 5)] == [STRIDE - 1, STRIDE]


def test_a_first_push_past_the_bound_goes_straight_to_the_file(tmp_path: Path) -> None:
    store = LogStore(tmp_path / "logs")
    big = data(0, 400, width=200)
    assert len(big) > 64 * 1024
    assert push(store, "a1", 0, big) == 400
    assert isinstance(store.segment("a1"), Segment)
    assert inline_rows(store, "a1") == 0 and data_file(store, "a1").read_bytes() == big.encode()


def test_two_chunks_of_one_push_that_cross_the_bound_keep_both(tmp_path: Path) -> None:
    store = LogStore(tmp_path / "logs", inline_max_bytes=len(data(0, 6)))
    push(store, "a1", 0, data(0, 2))
    chunks = [
        LogChunk(attempt_uid="a1", first_line=2, data=data(2, 4)),  # still inline
        LogChunk(attempt_uid="a1", first_line=4, data=data(4, 9)),  # past the bound
    ]
    acks = store.push(LogPushRequest(worker_id="w", chunks=chunks), resolve).acks
    assert acks["a1"].lines == 9
    assert data_file(store, "a1").read_bytes() == data(0, 9).encode()
    assert inline_rows(store, "a1") == 0


def test_a_refused_chunk_keeps_an_earlier_chunks_move_to_the_file(tmp_path: Path) -> None:
    store = LogStore(tmp_path / "logs", inline_max_bytes=100)
    good = LogChunk(attempt_uid="a1", first_line=0, data=data(0, 5))
    bad = LogChunk(attempt_uid="b1", first_line=0, data="not json\n")
    with pytest.raises(InvalidArgument):
        store.push(LogPushRequest(worker_id="w", chunks=[good, bad]), resolve)
    row = store.attempt("a1")
    assert row is not None and not row.inline and row.lines == 5
    assert texts(store.segment("a1")) == [json.loads(line(n))["line"] for n in range(5)]


def test_an_inline_line_without_a_timestamp_is_refused_as_a_file_refuses_it(tmp_path: Path) -> None:
    for bound in (0, 10**6):
        store = LogStore(tmp_path / f"logs{bound}", inline_max_bytes=bound)
        with pytest.raises(InvalidArgument):
            push(store, "a1", 0, '{"stream":"stdout","line":"no ts"}\n')
        assert push(store, "a1", 0, data(0, 2)) == 2
        with pytest.raises(InvalidArgument):
            push(store, "a1", 2, data(2, 3) + '{"line":"no ts"}\n')
        assert store.segment("a1").lines == 2
        store.close()


def test_a_move_to_the_file_refused_for_a_bad_line_keeps_what_the_push_stored_before(tmp_path: Path) -> None:
    """The second chunk of a push takes the log past the bound with a line (at a checkpoint) that
    has no timestamp: it is refused, as a file log refuses it, and the first chunk's lines stay."""
    bad = data(10, STRIDE) + '{"stream":"stdout","line":"no ts"}\n'
    for bound in (0, 10**6):
        store = LogStore(tmp_path / f"logs{bound}", inline_max_bytes=bound)
        chunks = [
            LogChunk(attempt_uid="a1", first_line=0, data=data(0, 10)),
            LogChunk(attempt_uid="a1", first_line=10, data=bad),
        ]
        with pytest.raises(InvalidArgument):
            store.push(LogPushRequest(worker_id="w", chunks=chunks), resolve)
        row = store.attempt("a1")
        assert row is not None and row.lines == 10
        assert [r.raw for r in store.segment("a1").iter_all()] == [line(n) for n in range(10)]
        assert push(store, "a1", 10, data(10, 12)) == 12
        store.close()


# ---------------------------------------------------------------------------- crashes

CRASH_MID_SPILL = """
import os, sys
from iris.cluster.controller.logstore import LogStore
from iris.rpc.log_models import LogChunk, LogPushRequest

root, first, more = sys.argv[1], sys.argv[2], sys.argv[3]
resolve = lambda uids: {u: ("/u/job/0", 0) for u in uids}
store = LogStore(root, inline_max_bytes=len(first))
store.push(LogPushRequest(worker_id="w", chunks=[LogChunk(attempt_uid="a1", first_line=0, data=first)]), resolve)
write = store.index.write

def die_before_the_row_flips(writes):
    if writes.spills:
        os._exit(17)  # the file is written whole; the transaction never runs
    write(writes)

store.index.write = die_before_the_row_flips
n = first.count("\\n")
store.push(LogPushRequest(worker_id="w", chunks=[LogChunk(attempt_uid="a1", first_line=n, data=more)]), resolve)
"""


def test_a_crash_between_the_spill_file_and_the_row_flip_leaves_the_inline_log(tmp_path: Path) -> None:
    root = tmp_path / "logs"
    first, more = data(0, 4), data(4, 9)
    child = subprocess.run(
        [sys.executable, "-c", CRASH_MID_SPILL, str(root), first, more],
        capture_output=True,
        text=True,
        env={"PYTHONPATH": str(SRC)},
    )
    assert child.returncode == 17, child.stderr
    orphan = root / "a1" / "a1.jsonl"
    assert orphan.read_bytes() == (first + more).encode()  # written, never pointed at

    store = LogStore(root, inline_max_bytes=len(first))
    log = store.segment("a1")
    assert isinstance(log, InlineLog) and log.lines == 4  # the row is the truth
    row = store.attempt("a1")
    assert row is not None and row.inline and row.lines == 4
    # The worker resends (here fewer lines than the orphan holds): the file is written again, whole.
    assert push(store, "a1", 4, data(4, 7)) == 7
    assert orphan.read_bytes() == data(0, 7).encode()
    assert texts(store.segment("a1")) == [json.loads(line(n))["line"] for n in range(7)]
    store.close()


def test_an_index_write_that_fails_mid_spill_leaves_the_log_inline_and_the_next_push_moves_it(
    tmp_path: Path,
) -> None:
    store = LogStore(tmp_path / "logs", inline_max_bytes=len(data(0, 4)))
    push(store, "a1", 0, data(0, 4))
    write = store.index.write

    def full_disk(writes) -> None:
        raise sqlite3.OperationalError("database or disk is full")

    store.index.write = full_disk  # type: ignore[method-assign]
    with pytest.raises(InsufficientStorage):  # a 507 with one sentence, not a traceback
        push(store, "a1", 4, data(4, 6))
    store.index.write = write  # type: ignore[method-assign]
    log = store.segment("a1")
    assert isinstance(log, InlineLog) and log.lines == 4  # the orphan file is not read
    assert push(store, "a1", 4, data(4, 7)) == 7
    assert isinstance(store.segment("a1"), Segment)
    assert data_file(store, "a1").read_bytes() == data(0, 7).encode()


def test_a_restart_keeps_inline_logs_and_their_finals(tmp_path: Path) -> None:
    store = LogStore(tmp_path / "logs")
    push(store, "a1", 0, data(0, 3), final=True)
    push(store, "b1", 0, data(0, 2))
    store.close()
    again = LogStore(tmp_path / "logs")
    assert push(again, "a1", 0, "") == 3
    a1, b1 = again.attempt("a1"), again.attempt("b1")
    assert a1 is not None and a1.final and a1.inline
    assert b1 is not None and not b1.final and b1.lines == 2
    assert push(again, "b1", 1, data(1, 4)) == 4
    assert texts(again.segment("b1")) == [json.loads(line(n))["line"] for n in range(4)]
    assert not any(p.suffix == ".jsonl" for p in (tmp_path / "logs").rglob("*"))
    again.close()


# ---------------------------------------------------------------------------- readers


def test_readers_beside_pushes_see_whole_lines_of_a_growing_log_as_it_moves_to_its_file(
    tmp_path: Path,
) -> None:
    store = LogStore(tmp_path / "logs", inline_max_bytes=3000)
    total = 200
    done = threading.Event()
    seen: list[int] = []
    problems: list[str] = []

    def reader() -> None:
        last = 0
        while not done.is_set() or last < total:
            log = store.segment("a1")
            held = log.lines
            got = [r.raw for r in log.iter_all()]  # a file may have grown since: never shrunk
            if len(got) < held or len(got) < last:
                problems.append(f"{len(got)} lines after {last}, log says {held}")
            if got != [line(n) for n in range(len(got))]:
                problems.append(f"lines differ at {len(got)}")
            last = len(got)
            seen.append(last)

    threads = [threading.Thread(target=reader) for _ in range(2)]
    for t in threads:
        t.start()
    for n in range(total):
        assert push(store, "a1", n, data(n, n + 1)) == n + 1
    done.set()
    for t in threads:
        t.join(timeout=60)
    assert not problems, problems[:5]
    assert isinstance(store.segment("a1"), Segment) and max(seen) == total


def test_the_new_attempts_of_a_push_are_resolved_in_one_call(tmp_path: Path) -> None:
    calls: list[list[str]] = []

    def counting(uids: Sequence[str]) -> dict[str, tuple[str, int]]:
        calls.append(list(uids))
        return resolve(uids)

    store = LogStore(tmp_path / "logs")
    chunks = [LogChunk(attempt_uid=uid, first_line=0, data=data(0, 2)) for uid in ("a1", "b1", "zz")]
    acks = store.push(LogPushRequest(worker_id="w", chunks=chunks), counting).acks
    assert [acks[u].lines for u in ("a1", "b1", "zz")] == [2, 2, -1]
    assert calls == [["a1", "b1", "zz"]]
    store.push(LogPushRequest(worker_id="w", chunks=chunks), counting)
    assert calls[1:] == [["zz"]]  # known rows are not resolved again; the unknown one may appear later
    store.close()
    again = LogStore(tmp_path / "logs")
    more = [LogChunk(attempt_uid=uid, first_line=2, data=data(2, 3)) for uid in ("a1", "b1")]
    acks = again.push(LogPushRequest(worker_id="w", chunks=more), counting).acks
    assert [acks[u].lines for u in ("a1", "b1")] == [3, 3]  # their rows on disk, not new ones
    assert calls[2:] == [["a1", "b1"]]
    again.push(LogPushRequest(worker_id="w", chunks=more), counting)
    assert calls[3:] == []
    assert again.stored_lines(["a1", "b1", "zz"]) == {"a1": 3, "b1": 3, "zz": 0}
    again.close()


# ---------------------------------------------------------------------------- old stores

# The index as every store before inline logs wrote it (schema version 0).
V0_SCHEMA = """
CREATE TABLE log_attempts (
    attempt_uid TEXT PRIMARY KEY, task_id TEXT NOT NULL, job_id TEXT NOT NULL,
    attempt_number INTEGER NOT NULL, lines INTEGER NOT NULL DEFAULT 0, bytes INTEGER NOT NULL DEFAULT 0,
    first_ts REAL, last_ts REAL, final INTEGER NOT NULL DEFAULT 0, created_at REAL NOT NULL,
    updated_at REAL NOT NULL
);
CREATE INDEX log_attempts_job ON log_attempts(job_id);
CREATE INDEX log_attempts_task ON log_attempts(task_id, attempt_number);
CREATE INDEX log_attempts_age ON log_attempts(updated_at);
CREATE TABLE attempt_usage (attempt_uid TEXT PRIMARY KEY, usage_json TEXT NOT NULL, updated_at REAL NOT NULL);
"""


def old_store(root: Path, logs: dict[str, int], now: float) -> None:
    """A store as written before inline logs: a file per attempt and a version-0 index."""
    root.mkdir(parents=True)
    conn = sqlite3.connect(root / "index.sqlite3")
    conn.executescript(V0_SCHEMA)
    for uid, count in logs.items():
        (root / uid[:2]).mkdir(exist_ok=True)
        segment = Segment(root / uid[:2] / f"{uid}.jsonl")
        segment.append_at(0, [line(n) for n in range(count)])
        task_id, number = OWNERS[uid]
        conn.execute(
            "INSERT INTO log_attempts VALUES (?, ?, ?, ?, ?, ?, ?, ?, 0, ?, ?)",
            (
                uid,
                task_id,
                "/u/job",
                number,
                count,
                segment.bytes,
                segment.first_ts,
                segment.last_ts,
                now,
                now,
            ),
        )
    conn.commit()
    conn.close()


def test_a_store_from_before_inline_logs_reads_grows_and_retires_its_files(tmp_path: Path) -> None:
    root = tmp_path / "logs"
    old_store(root, {"a1": 3, "b1": STRIDE + 10}, now=10_000.0)
    clock = [10_050.0]
    store = LogStore(root, max_age_s=100, clock=lambda: clock[0])
    assert store.index.schema_version() == SCHEMA_VERSION == 1
    for uid, count in (("a1", 3), ("b1", STRIDE + 10)):
        row = store.attempt(uid)
        assert row is not None and not row.inline and row.lines == count
        log = store.segment(uid)
        assert isinstance(log, Segment) and [r.raw for r in log.iter_all()] == [line(n) for n in range(count)]
    assert push(store, "a1", 3, data(3, 5)) == 5  # an old log keeps growing in its file
    assert (root / "a1" / "a1.jsonl").read_bytes() == data(0, 5).encode()
    assert push(store, "c1", 0, data(0, 2)) == 2  # a new one is inline beside them
    assert isinstance(store.segment("c1"), InlineLog)
    tail = run_query(store, store.attempts_of_job("/u/job"), LogQuery(tail=1))
    assert [(x.attempt_uid, x.offset) for x in tail.lines] == [("c1", 1), ("a1", 4), ("b1", STRIDE + 9)]
    store.close()
    reopened = LogStore(root, max_age_s=100, clock=lambda: clock[0])  # migrated once, then as is
    assert reopened.index.schema_version() == 1 and reopened.segment("a1").lines == 5
    clock[0] = 10_120.0  # b1 (written at 10,000) is too old now; a1 and c1 were written at 10,050
    assert reopened.enforce_retention() == 1
    assert reopened.attempt("b1") is None and not (root / "b1" / "b1.jsonl").exists()
    assert not (root / "b1" / "b1.idx").exists()
    reopened.close()


# ---------------------------------------------------------------------------- retention


def test_retention_drops_inline_logs_by_age_and_by_size(tmp_path: Path) -> None:
    clock = [10_000.0]
    store = LogStore(tmp_path / "logs", max_age_s=100, max_total_bytes=10**9, clock=lambda: clock[0])
    push(store, "a1", 0, data(0, 5))
    clock[0] += 50
    push(store, "b1", 0, data(0, 3))
    clock[0] += 1
    push(store, "c1", 0, data(0, 2))
    assert store.index.total_bytes() == len(data(0, 5)) + len(data(0, 3)) + len(data(0, 2))
    clock[0] += 59  # a1 is 110 s old
    assert store.enforce_retention() == 1
    assert store.attempt("a1") is None and inline_rows(store, "a1") == 0
    assert store.segment("a1").lines == 0
    assert push(store, "a1", 0, data(0, 1)) == -1  # its worker is told to stop
    store.max_total_bytes = len(data(0, 2))  # room for c1 alone
    assert store.enforce_retention() == 1
    assert store.attempt("b1") is None and inline_rows(store, "b1") == 0
    assert store.attempt("c1") is not None and store.segment("c1").lines == 2
    store.close()


def test_retention_deletes_the_file_an_unfinished_spill_left(tmp_path: Path) -> None:
    clock = [10_000.0]
    store = LogStore(tmp_path / "logs", max_age_s=100, clock=lambda: clock[0])
    push(store, "a1", 0, data(0, 2))
    orphan = data_file(store, "a1")
    orphan.parent.mkdir(exist_ok=True)
    orphan.write_bytes(data(0, 9).encode())
    clock[0] += 200
    assert store.enforce_retention() == 1
    assert not orphan.exists()
    store.close()
