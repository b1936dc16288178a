"""The watchdog's fence, on the pid journal: kill every recorded tree, mark each attempt once."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.conftest import TEST_WORKER_ID, wait_until

from iris.cluster.runtime.pid_records import JOURNAL, PidJournal, PidRecord
from iris.cluster.runtime.proc_table import boot_id, group_alive, read_proc, scan_process_table
from iris.cluster.worker.watchdog import FENCED_DIR, fence


@pytest.fixture
def tree() -> Iterator[subprocess.Popen[bytes]]:
    popen = subprocess.Popen(["sh", "-c", "sleep 100 & sleep 100"], start_new_session=True)
    yield popen
    popen.kill()
    popen.wait()


def record_of(popen: subprocess.Popen[bytes], uid: str) -> PidRecord:
    """Its record, once the shell and both sleeps run (a fence while the shell still forks could miss one)."""
    wait_until(
        lambda: sum(1 for i in scan_process_table().values() if i.pgid == popen.pid) >= 3,
        what="the tree's processes",
    )
    info = read_proc(popen.pid)
    assert info is not None
    return PidRecord(uid, popen.pid, info.start_ticks, boot_id())


def test_fence_kills_every_tree_of_the_journal_and_marks_it_once(
    tmp_path: Path, tree: subprocess.Popen[bytes]
) -> None:
    (tmp_path / "pids").mkdir()
    journal = PidJournal(tmp_path / "pids")
    journal.started(record_of(tree, "f1"))
    journal.started(PidRecord("ended", 999_999_999, 1, boot_id()))
    journal.ended("ended")
    before = (tmp_path / "pids" / JOURNAL).read_bytes()
    done: set[PidRecord] = set()
    fence(tmp_path, TEST_WORKER_ID, done)
    wait_until(lambda: not group_alive(tree.pid), timeout=10, what="the fenced tree to die")
    assert sorted(p.name for p in (tmp_path / FENCED_DIR).iterdir()) == ["f1"]
    assert (tmp_path / "pids" / JOURNAL).read_bytes() == before  # the daemon's journal, untouched
    # The (stopped) daemon continues, reaps the leader and consumes its mark; the watchdog, still
    # seeing an old heartbeat, fences again: it must not mark the same attempt a second time.
    (tmp_path / FENCED_DIR / "f1").unlink()
    fence(tmp_path, TEST_WORKER_ID, done)
    assert list((tmp_path / FENCED_DIR).iterdir()) == []
    journal.close()
