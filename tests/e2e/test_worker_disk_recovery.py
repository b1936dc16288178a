"""A worker whose disk a failed attempt filled leaves DEGRADED by itself: retention deletes the
failed attempt's files (failed ones first) and the next job runs there. A 96 MB tmpfs holds the
whole cluster (needs root); the worker reports disk pressure below 32 MB free."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.conftest import wait_until

from iris.client import Entrypoint, IrisClient, LocalCluster, ResourceSpec
from iris.rpc.enums import JobState

SMALL = ResourceSpec(cpu=0.5, memory="64MB")


@pytest.fixture
def small_disk() -> Iterator[Path]:
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    # Task uids must reach the work dirs on it: a traversable mount point (pytest's are 0700).
    mnt = Path(tempfile.mkdtemp(prefix="iris-worker-disk-"))
    mnt.chmod(0o711)
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=96m,mode=0711", "tmpfs", str(mnt)],
                             capture_output=True)  # fmt: skip
    if mounted.returncode != 0:
        shutil.rmtree(mnt, ignore_errors=True)
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.decode().strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)
        shutil.rmtree(mnt, ignore_errors=True)


def test_a_worker_filled_by_a_failed_attempt_recovers_by_itself(small_disk: Path) -> None:
    with LocalCluster(workers=1, state_dir=small_disk / "cluster") as lc, IrisClient(lc.url) as client:
        # 80 MB of a 96 MB disk, then the attempt fails: its work dir is kept (for a while).
        filler = client.submit(
            Entrypoint.from_command("sh", "-c", "head -c 80000000 /dev/zero > big; exit 3"),
            name="filler",
            resources=SMALL,
            workspace=False,
        )
        assert filler.wait(timeout=120).state is JobState.FAILED
        # Nobody frees the disk: the worker does, and is HEALTHY (schedulable) again.
        wait_until(
            lambda: shutil.disk_usage(small_disk).free > 64 * 1000 * 1000,
            timeout=60,
            what="the failed attempt's files freed",
        )
        wait_until(
            lambda: [w.status.value for w in client.workers().workers] == ["HEALTHY"],
            timeout=60,
            what="the worker healthy again",
        )
        after = client.submit(Entrypoint.from_command("true"), name="after", resources=SMALL, workspace=False)
        assert after.wait(timeout=120).state is JobState.SUCCEEDED
