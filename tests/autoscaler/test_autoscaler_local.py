"""The autoscaler driving real worker daemons on the local platform, on the real clock."""

from __future__ import annotations

import importlib.util
import sqlite3
from pathlib import Path

import psutil
import pytest
from tests.conftest import free_port, wait_until

from iris.cluster.config import AutoscalerDefaults, BackoffConfig, LocalGroupOptions
from iris.cluster.controller.autoscaler import ActionKind, Autoscaler, AutoscalerStore
from iris.cluster.platforms import LocalPlatform, SliceState

from .helpers import demand, group

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("iris.cluster.worker.__main__") is None,
    reason="python -m iris.cluster.worker does not exist in this tree yet",
)


def test_boot_failure_falls_back_then_idle_slice_is_removed(tmp_path: Path) -> None:
    timings = AutoscalerDefaults(
        scale_down_delay_s=0.5,
        boot_timeout_s=60,
        backoff=BackoffConfig(failure_threshold=1, window_s=60, initial_s=60, max_s=60),
    )
    broken = group("broken", priority=1, local=LocalGroupOptions(fail_boot=True))
    good = group("good", priority=2)
    platform = LocalPlatform(tmp_path / "state")
    conn = sqlite3.connect(tmp_path / "db.sqlite3", isolation_level=None, check_same_thread=False)
    scaler = Autoscaler(
        [broken, good],
        platform,
        AutoscalerStore(conn),
        controller_url=f"http://127.0.0.1:{free_port()}",
        timings=timings,
    )
    work = [demand(tasks=1)]
    try:

        def good_slice_ready() -> bool:
            scaler.tick(work)
            return any(s.group == "good" and s.state is SliceState.READY for s in scaler.slices())

        wait_until(good_slice_ready, timeout=60, interval=0.2, what="fallback slice ready")
        statuses = {s.name: s for s in scaler.status()}
        assert statuses["broken"].in_backoff
        boot_failure = next(a for a in scaler.actions() if a.action is ActionKind.BOOT_FAILED)
        assert boot_failure.slice_id == "broken-1"
        assert "unrecognized arguments: --fail-boot-on-purpose" in boot_failure.reason
        (good_slice,) = [s for s in scaler.slices() if s.group == "good"]
        pids = [
            p.pid
            for p in psutil.process_iter(["cmdline"])
            if good_slice.slice_id in " ".join(p.info["cmdline"] or [])
        ]
        assert pids

        def scaled_down() -> bool:
            scaler.tick([], {})
            return not scaler.slices()

        wait_until(scaled_down, timeout=30, interval=0.2, what="idle slice removed")
        assert platform.list_slices() == []
        assert not [
            p for p in pids if psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE
        ]
        kinds = [a.action for a in scaler.actions() if a.group == "good"]
        assert kinds == [ActionKind.SCALE_UP, ActionKind.SLICE_READY, ActionKind.SCALE_DOWN]
    finally:
        for info in platform.list_slices():
            platform.terminate(info.slice_id)
        conn.close()
