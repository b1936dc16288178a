"""Platforms: the in-memory fake, the manual host list, and real local worker daemons."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import httpx
import psutil
import pytest
from tests.conftest import free_port, wait_until

from iris.cluster.config import LocalGroupOptions, PlatformConfig, ScaleGroupConfig
from iris.cluster.platforms import (
    FakePlatform,
    LocalPlatform,
    ManualPlatform,
    Platform,
    PlatformError,
    SliceState,
    make_platform,
)
from iris.rpc.errors import InvalidArgument
from iris.rpc.models import ResourceSpec


def group(name: str = "cpu", num_vms: int = 1, **fields) -> ScaleGroupConfig:
    return ScaleGroupConfig(
        name=name, resources=ResourceSpec(cpu=1, memory="1GB"), num_vms=num_vms, max_slices=4, **fields
    )


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


# ---------------------------------------------------------------- fake


def test_fake_platform_lifecycle() -> None:
    clock = Clock()
    platform = FakePlatform(clock, boot_delay_s=5)
    assert isinstance(platform, Platform)
    handle = platform.create_slice(group(num_vms=2), "cpu-1", "http://c")
    assert handle.worker_ids == ("cpu-1-w0", "cpu-1-w1")
    assert platform.describe("cpu-1").state is SliceState.BOOTING
    clock.now += 5
    info = platform.describe("cpu-1")
    assert info.state is SliceState.READY
    assert len(info.addresses) == 2
    platform.kill_slice("cpu-1", "preempted")
    assert (platform.describe("cpu-1").state, platform.describe("cpu-1").error) == (
        SliceState.FAILED,
        "preempted",
    )
    platform.terminate("cpu-1")
    platform.terminate("cpu-1")  # idempotent
    assert platform.list_slices() == []
    assert platform.terminated == ["cpu-1"]
    with pytest.raises(KeyError):
        platform.describe("cpu-1")


def test_fake_platform_injection() -> None:
    clock = Clock()
    platform = FakePlatform(clock)
    platform.inject("cpu", fail_boots=1, hang_boots=1, create_errors=1, boot_delay_s=2)
    with pytest.raises(PlatformError, match="injected create failure"):
        platform.create_slice(group(), "cpu-1", "http://c")
    platform.create_slice(group(), "cpu-2", "http://c")  # fails to boot
    platform.create_slice(group(), "cpu-3", "http://c")  # hangs
    platform.create_slice(group(), "cpu-4", "http://c")  # boots normally
    with pytest.raises(PlatformError, match="already exists"):
        platform.create_slice(group(), "cpu-4", "http://c")
    assert {s.slice_id: s.state for s in platform.list_slices()} == {
        "cpu-2": SliceState.BOOTING,
        "cpu-3": SliceState.BOOTING,
        "cpu-4": SliceState.BOOTING,
    }
    clock.now += 1000
    assert {s.slice_id: s.state for s in platform.list_slices()} == {
        "cpu-2": SliceState.FAILED,
        "cpu-3": SliceState.BOOTING,
        "cpu-4": SliceState.READY,
    }


# ---------------------------------------------------------------- manual


def test_manual_platform_reports_registered_hosts() -> None:
    registered = [("w1", "10.0.0.1:10001"), ("w2", "10.0.0.3:9000")]
    platform = ManualPlatform(["10.0.0.1", "10.0.0.2", "10.0.0.3:9000"], lambda: registered)
    states = {s.slice_id: (s.state, s.worker_ids) for s in platform.list_slices()}
    assert states == {
        "manual-10.0.0.1": (SliceState.READY, ("w1",)),
        "manual-10.0.0.2": (SliceState.BOOTING, ()),
        "manual-10.0.0.3-9000": (SliceState.READY, ("w2",)),
    }
    assert platform.describe("manual-10.0.0.2").error == "no worker has registered from 10.0.0.2 yet"
    with pytest.raises(PlatformError, match="cannot create machines"):
        platform.create_slice(group(), "x", "http://c")
    with pytest.raises(PlatformError, match="by hand"):
        platform.terminate("manual-10.0.0.1")


def test_make_platform(tmp_path: Path) -> None:
    assert isinstance(make_platform(PlatformConfig(kind="fake"), tmp_path), FakePlatform)
    assert isinstance(make_platform(PlatformConfig(kind="local"), tmp_path), LocalPlatform)
    manual = make_platform(PlatformConfig(kind="manual", manual={"hosts": ["h1"]}), tmp_path)
    assert isinstance(manual, ManualPlatform)
    unknown = PlatformConfig.model_construct(
        kind="gce", manual=None
    )  # past validation, as a new kind would be
    with pytest.raises(InvalidArgument, match="unknown platform kind 'gce': use local, manual or fake"):
        make_platform(unknown, tmp_path)


# ---------------------------------------------------------------- local (real worker daemons)

requires_worker = pytest.mark.skipif(
    importlib.util.find_spec("iris.cluster.worker.__main__") is None,
    reason="python -m iris.cluster.worker does not exist in this tree yet",
)


def _processes_of(slice_dir: Path) -> list[psutil.Process]:
    """Live processes started for a slice (matched by the slice dir on their command line)."""
    found = []
    for proc in psutil.process_iter(["cmdline", "status"]):
        cmdline = " ".join(proc.info["cmdline"] or [])
        if str(slice_dir) in cmdline and proc.info["status"] != psutil.STATUS_ZOMBIE:
            found.append(proc)
    return found


@pytest.fixture
def local(tmp_path: Path):
    platform = LocalPlatform(tmp_path / "state", terminate_grace_s=5)
    yield platform
    for info in platform.list_slices():
        platform.terminate(info.slice_id)


@requires_worker
def test_local_slice_runs_real_worker_daemons(local: LocalPlatform, tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{free_port()}"  # nobody listens: workers keep retrying registration
    handle = local.create_slice(group("cpu", num_vms=2, attributes={"zone": "a"}), "cpu-1", url)
    assert handle.worker_ids == ("cpu-1-w0", "cpu-1-w1")
    info = wait_until(
        lambda: (i := local.describe("cpu-1")).state is SliceState.READY and i, timeout=60, what="slice ready"
    )
    assert info.worker_ids == ("cpu-1-w0", "cpu-1-w1")
    for address in info.addresses:
        assert httpx.get(f"http://{address}/healthz", timeout=5).status_code == 200

    slice_dir = tmp_path / "state" / "slices" / "cpu-1"
    # Each worker daemon has a watchdog process beside it; count the daemons themselves.
    procs = [p for p in _processes_of(slice_dir) if "--slice-id" in p.cmdline()]
    assert len(procs) == 2
    cmdline = procs[0].cmdline()
    for flag in ("--controller", url, "--slice-id", "cpu-1", "--scale-group", "cpu", "--cpu", "1"):
        assert flag in cmdline
    assert "zone=a" in cmdline and "scale-group=cpu" in cmdline and "slice=cpu-1" in cmdline
    assert (slice_dir / "worker-0.log").exists()

    local.terminate("cpu-1")
    assert _processes_of(slice_dir) == []
    assert all(not p.is_running() or p.status() == psutil.STATUS_ZOMBIE for p in procs)
    assert local.list_slices() == []
    assert (slice_dir / "worker-0.log").exists(), "logs outlive the slice"


@requires_worker
def test_a_new_platform_instance_adopts_running_slices(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    first = LocalPlatform(tmp_path / "state")
    first.create_slice(group(), "cpu-1", url)
    wait_until(lambda: first.describe("cpu-1").state is SliceState.READY, timeout=60, what="slice ready")
    record = json.loads((tmp_path / "state" / "slices" / "cpu-1" / "slice.json").read_text())
    pid = record["workers"][0]["pid"]

    second = LocalPlatform(tmp_path / "state")  # a restarted controller
    (info,) = second.list_slices()
    assert (info.slice_id, info.state, info.scale_group) == ("cpu-1", SliceState.READY, "cpu")
    assert psutil.Process(pid).is_running()

    second.terminate("cpu-1")
    wait_until(lambda: not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE)
    assert second.list_slices() == [] and first.list_slices() == []


@requires_worker
def test_a_worker_that_dies_fails_its_slice(local: LocalPlatform, tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    local.create_slice(group(num_vms=2), "cpu-1", url)
    wait_until(lambda: local.describe("cpu-1").state is SliceState.READY, timeout=60, what="slice ready")
    record = json.loads((tmp_path / "state" / "slices" / "cpu-1" / "slice.json").read_text())
    psutil.Process(record["workers"][1]["pid"]).kill()
    info = wait_until(
        lambda: (i := local.describe("cpu-1")).state is SliceState.FAILED and i, what="slice failed"
    )
    assert info.error.startswith("worker cpu-1-w1 exited with code -9")


@requires_worker
def test_fail_boot_option_fails_for_real(local: LocalPlatform) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    local.create_slice(group("broken", local=LocalGroupOptions(fail_boot=True)), "broken-1", url)
    info = wait_until(
        lambda: (i := local.describe("broken-1")).state is SliceState.FAILED and i,
        timeout=30,
        what="boot failure",
    )
    assert "worker broken-1-w0 exited with code 2" in info.error
    assert "--fail-boot-on-purpose" in info.error, "the error quotes the worker's own complaint from its log"
    local.terminate("broken-1")
    assert local.list_slices() == []


def test_terminating_an_unknown_local_slice_is_a_no_op(tmp_path: Path) -> None:
    platform = LocalPlatform(tmp_path)
    platform.terminate("nope")
    assert platform.list_slices() == []
    with pytest.raises(KeyError):
        platform.describe("nope")
