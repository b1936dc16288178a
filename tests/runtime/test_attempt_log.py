"""The JSON-lines attempt log: line splitting, streams, and paging."""

from __future__ import annotations

from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from iris.cluster.runtime.attempt_log import (
    MAX_LINE_BYTES,
    SMALL_LOG_BYTES,
    AttemptLogWriter,
    LineIndex,
    read_log_page,
    rotated_paths,
)


def lines_of(path: Path) -> list[tuple[str, str]]:
    return [(d["stream"], d["line"]) for d in read_log_page(path, 0, 10**6).lines]


def test_chunks_are_split_into_lines_across_reads(tmp_path: Path) -> None:
    log = AttemptLogWriter(tmp_path / "log")
    log.feed("stdout", b"hel")
    log.feed("stderr", b"warn\r\n")
    log.feed("stdout", b"lo\nwor")
    log.system("an event")
    log.feed("stdout", b"ld\n\xff\n")
    log.end_stream("stdout")
    log.close()
    assert lines_of(tmp_path / "log") == [
        ("stderr", "warn"),
        ("stdout", "hello"),
        ("system", "an event"),
        ("stdout", "world"),
        ("stdout", "\ufffd"),
    ]


def test_unterminated_output_becomes_a_line_at_end_of_stream(tmp_path: Path) -> None:
    log = AttemptLogWriter(tmp_path / "log")
    log.feed("stdout", b"partial")
    assert lines_of(tmp_path / "log") == []
    log.end_stream("stdout")
    assert lines_of(tmp_path / "log") == [("stdout", "partial")]


def test_a_huge_line_is_cut(tmp_path: Path) -> None:
    log = AttemptLogWriter(tmp_path / "log")
    log.feed("stdout", b"x" * (MAX_LINE_BYTES * 2 + 5))
    log.end_stream("stdout")
    assert [len(text) for _, text in lines_of(tmp_path / "log")] == [MAX_LINE_BYTES, MAX_LINE_BYTES, 5]


def test_a_half_written_line_is_not_read(tmp_path: Path) -> None:
    path = tmp_path / "log"
    path.write_bytes(b'{"ts":1.0,"stream":"stdout","line":"a"}\n{"ts":2.0,"str')
    page = read_log_page(path, 0, 10)
    assert [d["line"] for d in page.lines] == ["a"] and page.next_offset == 1 and page.at_end


@settings(max_examples=30, deadline=None)
@given(
    st.lists(
        st.text(
            alphabet=st.characters(blacklist_characters="\n\r", blacklist_categories=("Cs",)), max_size=20
        ),
        max_size=40,
    ),
    st.integers(1, 7),
)
def test_paging_reads_every_line_once(tmp_path_factory, texts: list[str], limit: int) -> None:
    path = tmp_path_factory.mktemp("log") / "log"
    log = AttemptLogWriter(path)
    for text in texts:
        log.feed("stdout", text.encode() + b"\n")
    log.close()
    seen, offset = [], 0
    while True:
        page = read_log_page(path, offset, limit)
        seen += [d["line"] for d in page.lines]
        assert page.next_offset == offset + len(page.lines)
        offset = page.next_offset
        if page.at_end:
            break
    assert seen == texts


@settings(max_examples=25, deadline=None)
@given(
    st.integers(0, 60), st.lists(st.tuples(st.integers(0, 70), st.integers(1, 9)), min_size=1, max_size=12)
)
def test_line_index_pages_match_a_full_scan(
    tmp_path_factory, count: int, reads: list[tuple[int, int]]
) -> None:
    path = tmp_path_factory.mktemp("log") / "log"
    log = AttemptLogWriter(path)
    for i in range(count):
        log.feed("stdout", f"line {i} {'x' * (i % 7)}\n".encode())
    log.close()
    index = LineIndex(stride=4)
    for offset, limit in reads:  # the same index serves every read, in any order
        indexed = read_log_page(path, offset, limit, index)
        plain = read_log_page(path, offset, limit)
        assert indexed == plain


def test_log_rotates_by_size_and_keeps_the_newest_output(tmp_path: Path) -> None:
    path = tmp_path / "log.jsonl"
    log = AttemptLogWriter(path, max_bytes=10_000, files=5)
    for i in range(1000):
        log.feed("stdout", f"line {i:04d} with some padding to make it longer\n".encode())
    log.system("attempt SUCCEEDED, exit code 0")
    log.close()
    files = rotated_paths(path, 5)
    assert [f.name for f in files] == [f"log.jsonl.{k}" for k in (4, 3, 2, 1)] + ["log.jsonl"]
    assert all(f.exists() for f in files)
    assert all(f.stat().st_size <= 2_000 for f in files)  # 10,000 bytes over 5 files
    assert sum(f.stat().st_size for f in files) <= 10_000
    kept = [line for f in files for _, line in lines_of(f)]
    # The end survives (where the error is); the start was dropped; what is kept is contiguous.
    assert kept[-2:] == ["line 0999 with some padding to make it longer", "attempt SUCCEEDED, exit code 0"]
    numbers = [int(line.split()[1]) for line in kept[:-1]]
    assert numbers == list(range(numbers[0], 1000)) and numbers[0] > 0
    assert log.rotations > 4


def test_a_small_new_log_hands_over_its_whole_content_once_closed(tmp_path: Path) -> None:
    path = tmp_path / "a.jsonl"
    log = AttemptLogWriter(path, exclusive=True)
    log.system("started")
    log.feed("stdout", b"hello\nwor")
    assert log.take_whole() is None  # still open: more may come
    log.end_stream("stdout")
    log.close()
    assert log.take_whole() == path.read_bytes()
    assert log.take_whole() is None  # handed over once


def test_no_whole_content_for_a_log_that_grew_rotated_or_was_appended_to(tmp_path: Path) -> None:
    big = AttemptLogWriter(tmp_path / "big", exclusive=True)
    big.feed("stdout", b"x" * SMALL_LOG_BYTES + b"\n")
    big.close()
    rotated = AttemptLogWriter(tmp_path / "rotated", max_bytes=500, files=5, exclusive=True)
    for i in range(10):
        rotated.feed("stdout", f"line {i}\n".encode())
    rotated.close()
    (tmp_path / "appended").write_bytes(b'{"ts":1.0,"stream":"stdout","line":"before"}\n')
    appended = AttemptLogWriter(tmp_path / "appended")
    appended.system("after")
    appended.close()
    assert rotated.rotations > 0
    assert [big.take_whole(), rotated.take_whole(), appended.take_whole()] == [None, None, None]


def test_a_replayed_output_skips_what_the_log_holds(tmp_path: Path) -> None:
    from iris.cluster.runtime.attempt_log import count_output_lines

    path = tmp_path / "a.jsonl"
    first = AttemptLogWriter(path, exclusive=True)
    first.feed("stdout", b"one\ntwo\n" + b"x" * (MAX_LINE_BYTES + 5))  # a long line, cut: one piece logged
    first.feed("stderr", b"e1\n")
    first.system("daemon killed here")
    first.close()
    assert count_output_lines(path) == (2, 1)
    again = AttemptLogWriter(path)  # a restarted worker appends the container's replayed output
    again.skip_lines(*count_output_lines(path))
    again.feed("stdout", b"one\ntw")
    again.feed("stdout", b"o\n" + b"x" * (MAX_LINE_BYTES + 5) + b"\nthree\n")
    again.feed("stderr", b"e1\ne2\n")
    again.close()
    lines = [(x["stream"], x["line"]) for x in read_log_page(path, 0, 100).lines if x["stream"] != "system"]
    assert lines == [
        ("stdout", "one"),
        ("stdout", "two"),
        ("stdout", "x" * MAX_LINE_BYTES),
        ("stderr", "e1"),
        # The line whose end the killed daemon never saw comes again whole (its first piece twice).
        ("stdout", "x" * (MAX_LINE_BYTES + 5)),
        ("stdout", "three"),
        ("stderr", "e2"),
    ]
