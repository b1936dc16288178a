"""Disk is bounded: an attempt over its disk request fails with the reason; on a full disk the
biggest attempt is blamed, not an innocent one; an attempt stuck BUILDING can still be killed."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from tests.runtime.helpers import make_spec, wait_done

from iris.cluster.runtime import SubprocessRuntime
from iris.cluster.runtime.disk import DiskView, decide_disk, dir_usage, free_inodes
from iris.cluster.runtime.policy import KillReason
from iris.cluster.runtime.subprocess_runtime import Preparation
from iris.rpc.enums import TaskState
from iris.rpc.models import ResourceSpec, RunSpec


def runtime_with(tmp_path: Path, **options) -> SubprocessRuntime:
    return SubprocessRuntime(
        tmp_path / "state",
        worker_id="w-disk",
        controller_url="http://127.0.0.1:1",
        kill_grace_s=1.0,
        monitor_interval_s=0.05,
        disk_check_interval_s=0.2,
        **options,
    )


@pytest.fixture
def runtime(tmp_path: Path) -> Iterator[SubprocessRuntime]:
    rt = runtime_with(tmp_path)
    yield rt
    rt.shutdown()


def test_attempt_over_its_disk_request_fails_with_the_reason(runtime: SubprocessRuntime) -> None:
    writer = "head -c 3000000 /dev/zero > big; sleep 100"
    over = make_spec("sh", "-c", writer, resources=ResourceSpec(cpu=1, memory="1GB", disk="1MB"))
    fits = make_spec("sh", "-c", writer, resources=ResourceSpec(cpu=1, memory="1GB", disk="10MB"))
    runtime.start_many([over, fits])
    snap = wait_done(runtime, over.attempt_uid)
    assert snap.state is TaskState.FAILED and "over its request of" in (snap.error or "")
    current = runtime.snapshot(fits.attempt_uid)
    assert current is not None and current.state is TaskState.RUNNING


def test_full_disk_blames_the_attempt_that_filled_it(tmp_path: Path) -> None:
    # A disk that always looks full: the attempt using the most is failed, the small one kept.
    rt = runtime_with(tmp_path, min_free_disk_bytes=1 << 60)
    try:
        hog = make_spec("sh", "-c", "head -c 2000000 /dev/zero > big; sleep 100")
        small = make_spec("sh", "-c", "echo x > small; sleep 100")
        rt.start_many([hog, small])
        snap = wait_done(rt, hog.attempt_uid)
        assert snap.state is TaskState.FAILED and "disk is full" in (snap.error or "")
        current = rt.snapshot(small.attempt_uid)
        assert current is not None and current.state is TaskState.RUNNING
    finally:
        rt.shutdown()


class StuckPreparer:
    """A BUILDING phase that never returns on its own (e.g. a fetch hanging on a full disk)."""

    def __init__(self) -> None:
        self.release = threading.Event()

    def needed(self, spec: RunSpec) -> bool:
        return True

    def prepare(
        self, spec: RunSpec, work_dir: Path, log: Callable[[str], None], cancelled: Callable[[], bool]
    ) -> Preparation:
        self.release.wait(60)
        return Preparation()


def test_an_attempt_stuck_building_is_killed_at_once(tmp_path: Path) -> None:
    preparer = StuckPreparer()
    rt = runtime_with(tmp_path, preparer=preparer)
    try:
        spec = make_spec("sleep", "100")
        rt.start(spec)
        assert rt.snapshot(spec.attempt_uid).state is TaskState.BUILDING
        rt.kill(spec.attempt_uid, KillReason.STOP, "stopped by the controller")
        snap = wait_done(rt, spec.attempt_uid, timeout=5)
        assert snap.state is TaskState.KILLED and snap.runtime_released
        preparer.release.set()  # the preparation returning later changes nothing
        assert rt.wait_for(lambda: False, 0.5) is False
        after = rt.snapshot(spec.attempt_uid)
        assert after is not None and after.state is TaskState.KILLED
        assert rt.running_count() == 0
    finally:
        preparer.release.set()
        rt.shutdown()


def test_decide_disk_is_pure() -> None:
    views = [DiskView("a", 5, 0), DiskView("b", 50, 100), DiskView("c", 200, 100)]
    assert [e.attempt_uid for e in decide_disk(views, free_bytes=10**9)] == ["c"]
    assert [e.attempt_uid for e in decide_disk(views[:2], free_bytes=0)] == ["b"]
    assert decide_disk(views[:2], free_bytes=10**9) == []
    assert decide_disk([], free_bytes=0) == []


def test_dir_usage_counts_allocated_bytes(tmp_path: Path) -> None:
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "f").write_bytes(b"x" * 100_000)
    (tmp_path / "link").symlink_to("/usr")  # not followed
    assert 100_000 <= dir_usage(tmp_path) < 1_000_000


def test_an_attempts_log_counts_against_its_disk_request(runtime: SubprocessRuntime) -> None:
    """A log flood is charged to its attempt (not to the worker): it fails with kind DISK."""
    flood = make_spec("sh", "-c", "head -c 3000000 /dev/zero | tr '\\0' 'x' | fold -w 1000; sleep 100",
                      resources=ResourceSpec(cpu=1, memory="1GB", disk="1MB"))  # fmt: skip
    quiet = make_spec("sleep", "100", resources=ResourceSpec(cpu=1, memory="1GB", disk="1MB"))
    runtime.start_many([flood, quiet])
    snap = wait_done(runtime, flood.attempt_uid)
    assert snap.state is TaskState.FAILED
    assert (snap.error or "").startswith("out of disk: ") and "over its request of" in (snap.error or "")
    current = runtime.snapshot(quiet.attempt_uid)
    assert current is not None and current.state is TaskState.RUNNING


def test_out_of_inodes_blames_the_attempt_holding_the_most_files(tmp_path: Path) -> None:
    views = [DiskView("few", 10**6, 0, entries=3), DiskView("many", 10, 0, entries=500_000)]
    (decision,) = decide_disk(views, free_bytes=10**12, free_inode_count=100)
    assert decision.attempt_uid == "many" and decision.reason is KillReason.DISK
    assert decision.message.startswith("out of disk: ") and "inodes" in decision.message
    assert decide_disk(views, free_bytes=10**12, free_inode_count=10**6) == []
    assert free_inodes(tmp_path) is None or free_inodes(tmp_path) > 0


def test_a_full_disk_frees_finished_attempts_files_failed_first(tmp_path: Path) -> None:
    """Short of space the worker deletes finished attempts' work dirs (their logs stay)."""
    rt = runtime_with(tmp_path, min_free_disk_bytes=1 << 60)  # a disk that always looks full
    try:
        failed = make_spec("sh", "-c", "echo data > kept; echo bye; exit 3")
        rt.start(failed)
        assert wait_done(rt, failed.attempt_uid).state is TaskState.FAILED
        work = rt.tasks_dir / failed.attempt_uid
        assert rt.wait_for(lambda: not work.exists(), 10), "the failed attempt's work dir was not freed"
        assert [line.line for line in rt.read_logs(failed.attempt_uid).lines if line.stream == "stdout"] == [
            "bye"
        ]
    finally:
        rt.shutdown()
