"""The pid journal: one append-only file of start and end lines, torn lines, compaction, old records."""

from __future__ import annotations

import json
from pathlib import Path

from iris.cluster.runtime.pid_records import (
    JOURNAL,
    PidJournal,
    PidRecord,
    kill_leftover_trees,
    load_pid_records,
    parse_journal,
)


def record(uid: str, pgid: int = 4242) -> PidRecord:
    return PidRecord(uid, pgid, 1000 + pgid, "boot-1")


def live_uids(pids_dir: Path) -> set[str]:
    return {r.attempt_uid for r in load_pid_records(pids_dir)}


def test_an_attempt_is_recorded_from_its_start_to_its_end(tmp_path: Path) -> None:
    journal = PidJournal(tmp_path)
    journal.started(record("a", 11))
    journal.started(record("b", 12))
    assert sorted(load_pid_records(tmp_path), key=lambda r: r.attempt_uid) == [
        record("a", 11),
        record("b", 12),
    ]
    journal.ended("a")
    journal.ended("never-started")  # writes nothing
    assert load_pid_records(tmp_path) == [record("b", 12)]
    assert [p.name for p in tmp_path.iterdir()] == [JOURNAL]  # one file, however many attempts
    assert (tmp_path / JOURNAL).read_bytes().count(b"\n") == 3
    journal.close()


def test_the_same_attempt_started_again_is_recorded_with_its_new_group(tmp_path: Path) -> None:
    journal = PidJournal(tmp_path)
    journal.started(record("a", 11))
    journal.ended("a")
    journal.started(record("a", 13))
    assert load_pid_records(tmp_path) == [record("a", 13)]
    journal.close()


def test_a_torn_last_line_and_an_unreadable_line_are_skipped() -> None:
    data = b"+ a 1 2 boot\n+ b 3 4 boot\nnot a record\n- a\n+ c 5 6 -\n+ d 7 8 bo"
    assert parse_journal(data) == {"b": PidRecord("b", 3, 4, "boot"), "c": PidRecord("c", 5, 6, "")}
    assert parse_journal(b"+ a 1 2 boot\n- a") == {"a": PidRecord("a", 1, 2, "boot")}  # torn end line
    assert parse_journal(b"") == {}


def test_a_journal_torn_by_a_crash_still_names_every_whole_record(tmp_path: Path) -> None:
    journal = PidJournal(tmp_path)
    journal.started(record("a", 11))
    journal.close()
    with open(tmp_path / JOURNAL, "ab") as f:
        f.write(b"+ b 12 10")  # the worker died in the middle of this write
    assert load_pid_records(tmp_path) == [record("a", 11)]


def test_compaction_keeps_only_the_live_records_and_appends_go_on(tmp_path: Path) -> None:
    journal = PidJournal(tmp_path, compact_after_lines=20)
    for uid in ("keep1", "keep2"):
        journal.started(record(uid))
    for i in range(40):
        journal.started(record(f"short{i}"))
        journal.ended(f"short{i}")
    lines = (tmp_path / JOURNAL).read_bytes().count(b"\n")
    assert lines < 20, lines  # rewritten, not 82 lines
    assert live_uids(tmp_path) == {"keep1", "keep2"}
    journal.started(record("after"))  # written to the new file, not the one renamed away
    journal.ended("keep1")
    assert live_uids(tmp_path) == {"keep2", "after"}
    assert sorted(p.name for p in tmp_path.iterdir()) == [JOURNAL]
    journal.close()


def test_a_new_journal_forgets_what_the_previous_run_recorded(tmp_path: Path) -> None:
    old = PidJournal(tmp_path)
    old.started(record("left"))
    old.close()
    (tmp_path / "older.json").write_text(
        json.dumps({"attempt_uid": "older", "pgid": 5, "start_ticks": 6, "boot_id": "b"})
    )
    assert live_uids(tmp_path) == {"left", "older"}  # an older version's record files are read too
    PidJournal(tmp_path).close()  # the runtime opens it after killing the leftovers
    assert load_pid_records(tmp_path) == []
    assert [p.name for p in tmp_path.iterdir()] == [JOURNAL]


def test_killing_leftovers_only_reads_the_journal(tmp_path: Path) -> None:
    journal = PidJournal(tmp_path)
    journal.started(PidRecord("gone", 999_999_999, 1, "another-boot"))
    journal.close()
    before = (tmp_path / JOURNAL).read_bytes()
    assert kill_leftover_trees(tmp_path, "w-none") == ["gone"]
    assert (tmp_path / JOURNAL).read_bytes() == before  # the watchdog never writes the daemon's journal


def test_a_container_launcher_is_recorded_as_such_and_killed_alone(tmp_path: Path) -> None:
    import subprocess

    from iris.cluster.runtime.pid_records import kill_launchers
    from iris.cluster.runtime.proc_table import boot_id, read_proc

    launcher = subprocess.Popen(["sleep", "600"], start_new_session=True)
    try:
        info = read_proc(launcher.pid)
        assert info is not None
        mine = PidRecord("c", launcher.pid, info.start_ticks, boot_id(), 1234, container=True)
        journal = PidJournal(tmp_path)
        journal.started(mine)
        journal.started(PidRecord("p", 77, 1, "boot-1", -1, container=True))
        journal.close()
        assert sorted(load_pid_records(tmp_path), key=lambda r: r.attempt_uid) == [
            mine,
            PidRecord("p", 77, 1, "boot-1", -1, container=True),
        ]
        # Only the recorded tree: not every process of its task uid, nor its environment's.
        assert kill_launchers([mine]) == ["c"]
        assert launcher.wait(timeout=10) == -9
    finally:
        launcher.kill()
        launcher.wait()
