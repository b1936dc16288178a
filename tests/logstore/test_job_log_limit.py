"""One job's output cannot fill the controller's disk: a per-job byte bound, one marker line, and a
full disk answered with 507 and one log line per 30 s (not a traceback per push)."""

from __future__ import annotations

import errno
import json
import logging
from pathlib import Path

import pytest
from tests.logstore.test_inline_logs import data, push, texts

from iris.cluster.controller import disk_full
from iris.cluster.controller.logstore.log_store import LogStore
from iris.cluster.controller.logstore.segment import Segment
from iris.rpc.errors import InsufficientStorage


def test_a_jobs_output_past_its_bound_ends_with_one_marker_line(tmp_path: Path) -> None:
    limit = len(data(0, 40))
    store = LogStore(tmp_path / "logs", max_job_bytes=limit, inline_max_bytes=1024)
    assert push(store, "a1", 0, data(0, 30)) == 30
    # This chunk would take the job past its bound: acknowledged whole, one marker kept instead.
    assert push(store, "a1", 30, data(30, 60)) == 60
    assert push(store, "a1", 60, data(60, 500)) == 500  # the sender moves on; nothing is kept
    assert push(store, "a1", 500, data(500, 510), final=True) == 510
    kept = texts(store.segment("a1"))
    assert len(kept) == 31 and kept[:30] == [json.loads(line)["line"] for line in data(0, 30).splitlines()]
    assert kept[30].startswith("[iris] the output of job /u/job went over its") and "log limit" in kept[30]
    assert store.attempt("a1").final
    # Another attempt of the same job shares the bound: what would pass it becomes the marker.
    assert push(store, "b1", 0, data(0, 20)) == 20
    assert [t.startswith("[iris] the output of job /u/job") for t in texts(store.segment("b1"))] == [True]
    assert store.index.job_bytes("/u/job") < limit + 2 * 400
    store.close()


def test_a_full_disk_is_507_logged_once_and_pushes_work_again_with_space(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    store = LogStore(tmp_path / "logs", inline_max_bytes=0)  # every log in its file: the write seam
    real_append = Segment.append_at
    full = {"on": True}

    def append_at(self: Segment, first_line: int, lines: list[bytes]) -> None:
        if full["on"]:
            raise OSError(errno.ENOSPC, "No space left on device")
        real_append(self, first_line, lines)

    monkeypatch.setattr(Segment, "append_at", append_at)
    monkeypatch.setattr(disk_full, "_last", [float("-inf")])  # nothing logged before this test
    caplog.set_level(logging.ERROR)
    for _ in range(20):
        with pytest.raises(InsufficientStorage, match="log store disk is full") as refused:
            push(store, "a1", 0, data(0, 3))
        assert refused.value.status_code == 507
    full_lines = [r for r in caplog.records if "disk is full" in r.getMessage()]
    assert len(full_lines) == 1 and full_lines[0].exc_info is None  # one line, no traceback
    full["on"] = False  # space is back: the next push is stored
    assert push(store, "a1", 0, data(0, 3)) == 3
    assert len(texts(store.segment("a1"))) == 3
    store.close()
