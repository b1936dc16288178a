"""A full state disk: the API answers 507 with one message, /healthz 503, the loop logs once per
interval, and everything recovers by itself when space returns (a 4 MB tmpfs; needs root)."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from tests.conftest import wait_until

from iris.client import Entrypoint, IrisClient, LocalCluster, ResourceSpec
from iris.rpc.errors import InsufficientStorage


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    mnt = tmp_path / "disk"
    mnt.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(mnt)], capture_output=True
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.decode().strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def _fill(mnt: Path) -> Path:
    filler = mnt / "filler"
    # Unbuffered: a buffered file would hold the last partial write and raise ENOSPC again on close.
    with filler.open("wb", buffering=0) as f:
        try:
            while True:
                f.write(b"\0" * 65536)
        except OSError:
            pass  # ENOSPC: the disk is full
    return filler


def test_full_state_disk_answers_507_reports_unhealthy_and_recovers(tmp_path: Path, small_disk: Path) -> None:
    with LocalCluster(
        workers=0, state_dir=tmp_path / "cluster", controller_args=["--state-dir", str(small_disk)]
    ) as lc:
        client = IrisClient(lc.url)
        spec = {
            "entrypoint": Entrypoint.from_command("true"),
            "resources": ResourceSpec(cpu=0.5, memory="64MB"),
        }
        client.submit(name="before", wait_for_capacity=True, **spec)
        filler = _fill(small_disk)
        # The WAL may still have room for a few writes; a bounded number of submits fills it.
        refused = None
        for i in range(500):
            try:
                client.submit(name=f"fill-{i}", wait_for_capacity=True, **spec)
            except InsufficientStorage as exc:
                refused = exc
                break
        assert refused is not None, "the full disk was never noticed"
        assert "state disk is full" in refused.message
        health = httpx.get(f"{lc.url}/healthz")
        assert health.status_code == 503 and "state disk is full" in health.json()["error"]
        assert client.list_jobs().jobs  # reads still answer

        filler.unlink()
        wait_until(
            lambda: httpx.get(f"{lc.url}/healthz").status_code == 200, timeout=30, what="healthy again"
        )
        job = client.submit(name="after", wait_for_capacity=True, **spec)
        assert job.job_id.endswith("/after")
        log = lc.controller.log_path.read_text(errors="replace") if lc.controller else ""
        assert "Traceback" not in log
        assert log.count("control rounds are not writing") <= 2  # once per 30 s interval
