"""The controller's log store on a real directory: appends, acks, tails, time seeks, recovery, retention."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import pytest

from iris.cluster.controller.logstore import LogQuery, LogStore, format_cursor, parse_cursor, run_query
from iris.cluster.controller.logstore.query import select_attempts
from iris.cluster.controller.logstore.segment import STRIDE, Segment
from iris.rpc.errors import InvalidArgument
from iris.rpc.log_models import AttemptUsage, LogChunk, LogPushRequest


def encode(ts: float, text: str, stream: str = "stdout") -> str:
    return json.dumps({"ts": ts, "stream": stream, "line": text}, separators=(",", ":")) + "\n"


def lines(start: int, stop: int, *, t0: float = 1000.0, prefix: str = "line") -> str:
    return "".join(encode(t0 + i, f"{prefix} {i}") for i in range(start, stop))


OWNERS = {"a1": ("/u/job/0", 0), "b1": ("/u/job/1", 0), "a2": ("/u/job/0", 1), "c1": ("/u/job/kid/0", 0)}


def resolve(uids: Sequence[str]) -> dict[str, tuple[str, int]]:
    return {uid: OWNERS[uid] for uid in uids if uid in OWNERS}


def push(store: LogStore, uid: str, first: int, data: str, *, final: bool = False) -> int:
    request = LogPushRequest(
        worker_id="w", chunks=[LogChunk(attempt_uid=uid, first_line=first, data=data, final=final)]
    )
    return store.push(request, resolve).acks[uid].lines


@pytest.fixture
def store(tmp_path: Path):
    s = LogStore(tmp_path / "logs")
    yield s
    s.close()


def test_pushes_continue_skip_duplicates_and_refuse_gaps(store: LogStore) -> None:
    assert push(store, "a1", 0, lines(0, 10)) == 10
    assert push(store, "a1", 5, lines(5, 12)) == 12  # a resend overlapping what is stored
    assert push(store, "a1", 20, lines(20, 21)) == 12  # a gap: nothing stored, rewind to 12
    assert push(store, "a1", 0, "") == 12  # a probe
    assert push(store, "zz", 0, lines(0, 1)) == -1  # an attempt the controller never made
    texts = [json.loads(r.raw)["line"] for r in store.segment("a1").read(0, 100)]
    assert texts == [f"line {i}" for i in range(12)]


def test_bad_data_is_refused(store: LogStore) -> None:
    with pytest.raises(InvalidArgument):
        push(store, "a1", 0, "not json\n")
    with pytest.raises(InvalidArgument):
        push(store, "a1", 0, encode(1, "x").rstrip("\n"))


def test_a_refused_chunk_leaves_the_earlier_chunks_of_its_push_indexed(store: LogStore) -> None:
    good = LogChunk(attempt_uid="a1", first_line=0, data=lines(0, 3))
    bad = LogChunk(attempt_uid="b1", first_line=0, data="not json\n")
    with pytest.raises(InvalidArgument):
        store.push(LogPushRequest(worker_id="w", chunks=[good, bad]), resolve)
    row = store.index.get("a1")
    assert row is not None and row.lines == 3 and row.task_id == "/u/job/0"


def test_tail_reads_the_last_lines_and_paging_reads_any_window(store: LogStore) -> None:
    total = 3 * STRIDE + 17
    push(store, "a1", 0, lines(0, total))
    seg = store.segment("a1")
    assert [r.offset for r in seg.tail(5)] == list(range(total - 5, total))
    assert [json.loads(r.raw)["line"] for r in seg.tail(2)] == [f"line {total - 2}", f"line {total - 1}"]
    assert [r.offset for r in seg.tail(3, before=100)] == [97, 98, 99]
    assert [r.offset for r in seg.read(2 * STRIDE + 3, 4)] == list(range(2 * STRIDE + 3, 2 * STRIDE + 7))
    assert len(seg.tail(total + 10)) == total
    assert seg.line_at_time(1000.0 + 2 * STRIDE + 5) <= 2 * STRIDE + 5


def test_a_restart_recovers_counts_and_cuts_a_torn_line(tmp_path: Path) -> None:
    store = LogStore(tmp_path / "logs")
    push(store, "a1", 0, lines(0, STRIDE + 50))
    segment = store.segment("a1")
    assert isinstance(segment, Segment)  # past the inline bound: in its file
    path = segment.data_path
    store.close()
    with open(path, "ab") as f:
        f.write(b'{"ts":5,"stream":"std')  # the controller died mid-write
    again = LogStore(tmp_path / "logs")
    seg = again.segment("a1")
    assert seg.lines == STRIDE + 50
    assert push(again, "a1", STRIDE + 50, lines(STRIDE + 50, STRIDE + 60)) == STRIDE + 60
    assert [r.offset for r in seg.tail(2)] == [STRIDE + 58, STRIDE + 59]
    again.close()
    # The index file is rebuilt from the data file when it is lost.
    Segment(path).index_path.unlink()
    rebuilt = Segment(path)
    assert rebuilt.lines == STRIDE + 60
    assert [r.offset for r in rebuilt.read(STRIDE + 1, 2)] == [STRIDE + 1, STRIDE + 2]


def test_a_short_log_file_has_no_index_file_until_its_second_checkpoint(tmp_path: Path) -> None:
    """A log file's first checkpoint (line 0 at byte 0) needs no index file (a store keeping
    nothing inline has a file for every log). The index appears, checkpoint 0 included, once a log
    reaches STRIDE lines, and survives a restart."""
    store = LogStore(tmp_path / "logs", inline_max_bytes=0)
    push(store, "a1", 0, lines(0, 3))
    seg = store.segment("a1")
    assert isinstance(seg, Segment)
    assert seg.data_path.exists() and not seg.index_path.exists()
    assert [json.loads(r.raw)["line"] for r in seg.tail(2)] == ["line 1", "line 2"]
    assert seg.line_at_time(1001.5) <= 2
    store.close()
    reopened = Segment(seg.data_path)
    assert reopened.lines == 3 and not reopened.index_path.exists()
    push(again := LogStore(tmp_path / "logs"), "a1", 3, lines(3, STRIDE + 5))
    grown = again.segment("a1")
    assert isinstance(grown, Segment)
    assert grown.index_path.stat().st_size == 2 * 16  # checkpoints 0 and 1
    assert [r.offset for r in grown.read(STRIDE + 2, 2)] == [STRIDE + 2, STRIDE + 3]
    again.close()
    after = Segment(grown.data_path)
    assert after.lines == STRIDE + 5
    assert after.index_path.stat().st_size == 2 * 16
    assert [r.offset for r in after.read(STRIDE - 1, 3)] == [STRIDE - 1, STRIDE, STRIDE + 1]


def test_job_queries_tail_grep_since_and_follow(store: LogStore) -> None:
    push(store, "a1", 0, lines(0, 100, t0=1000.0, prefix="zero"), final=True)
    push(store, "b1", 0, lines(0, 100, t0=1000.5, prefix="one"))
    attempts = store.attempts_of_job("/u/job")
    assert {a.attempt_uid for a in attempts} == {"a1", "b1"}

    tail = run_query(store, attempts, LogQuery(tail=2))
    assert [line.line for line in tail.lines] == ["zero 98", "one 98", "zero 99", "one 99"]  # by time
    assert tail.truncated

    grep = run_query(store, attempts, LogQuery(grep=r"^one 4\d$", tasks=frozenset({1})))
    assert [line.line for line in grep.lines] == [f"one {i}" for i in range(40, 50)]

    since = run_query(store, attempts, LogQuery(since=1097.0))
    assert [line.line for line in since.lines] == [
        "zero 97",
        "one 97",
        "zero 98",
        "one 98",
        "zero 99",
        "one 99",
    ]

    first = run_query(store, attempts, LogQuery(limit=150))
    assert len(first.lines) == 150
    cursor = parse_cursor(format_cursor(first.cursor))
    rest = run_query(store, attempts, LogQuery(after=cursor))
    assert len(rest.lines) == 50
    assert {(x.task_index, x.offset) for x in first.lines}.isdisjoint(
        {(x.task_index, x.offset) for x in rest.lines}
    )
    push(store, "b1", 100, lines(100, 101, t0=1000.5, prefix="one"))
    newer = run_query(store, attempts, LogQuery(after=parse_cursor(format_cursor(rest.cursor))))
    assert [line.line for line in newer.lines] == ["one 100"]


def test_attempt_selection_and_children(store: LogStore) -> None:
    push(store, "a1", 0, lines(0, 1))
    push(store, "a2", 0, lines(0, 1))
    push(store, "c1", 0, lines(0, 1))
    own = store.attempts_of_job("/u/job")
    assert [a.attempt_uid for a in select_attempts(own, LogQuery())] == ["a2"]  # the latest attempt
    assert [a.attempt_uid for a in select_attempts(own, LogQuery(), {"/u/job/0": "a1"})] == ["a1"]
    assert sorted(a.attempt_uid for a in select_attempts(own, LogQuery(attempt="all"))) == ["a1", "a2"]
    assert [a.attempt_uid for a in select_attempts(own, LogQuery(attempt=0))] == ["a1"]
    family = store.attempts_of_job("/u/job", include_children=True)
    assert {a.attempt_uid for a in family} == {"a1", "a2", "c1"}
    assert store.attempts_of_job("/u/jo", include_children=True) == []


def test_retention_by_age_and_size(tmp_path: Path) -> None:
    now = [10_000.0]
    store = LogStore(tmp_path / "logs", max_age_s=100, max_total_bytes=10**9, clock=lambda: now[0])
    push(store, "a1", 0, lines(0, 50))
    now[0] += 50
    push(store, "b1", 0, lines(0, 50))
    now[0] += 60  # a1 is now 110 s old, b1 60 s
    assert store.enforce_retention() == 1
    assert store.attempt("a1") is None and store.attempt("b1") is not None
    assert push(store, "a1", 0, lines(0, 1)) == -1  # its worker is told to stop sending it
    store.max_total_bytes = 10
    assert store.enforce_retention() == 1
    assert store.attempt("b1") is None
    assert not any(p.suffix == ".jsonl" for p in (tmp_path / "logs").rglob("*"))
    store.close()


def test_usage_is_kept_per_attempt(store: LogStore) -> None:
    usage = AttemptUsage(cpu_seconds=1.5, rss_bytes=10, peak_rss_bytes=99, avg_rss_bytes=50, samples=3)
    store.push(
        LogPushRequest(worker_id="w", chunks=[LogChunk(attempt_uid="a1", first_line=0, usage=usage)]), resolve
    )
    assert store.usage(["a1"])["a1"].peak_rss_bytes == 99
