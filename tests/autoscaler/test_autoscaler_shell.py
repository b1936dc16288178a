"""The autoscaler shell over a FakePlatform, a fake clock and a real SQLite database."""

from __future__ import annotations

import json
import sqlite3
import threading
from pathlib import Path

import pytest

from iris.cluster.config import load_cluster_config
from iris.cluster.controller.autoscaler import ActionKind, Autoscaler, AutoscalerStore
from iris.cluster.platforms import FakePlatform, SliceState

from .helpers import TIMINGS, demand, group


class Clock:
    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def conn(tmp_path: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(tmp_path / "controller.sqlite3", isolation_level=None, check_same_thread=False)
    yield conn
    conn.close()


def make(conn: sqlite3.Connection, platform: FakePlatform, clock: Clock, *groups) -> Autoscaler:
    groups = groups or (group("cpu", max_slices=4),)
    return Autoscaler(
        groups,
        platform,
        AutoscalerStore(conn, threading.RLock()),
        clock,
        controller_url="http://c",
        timings=TIMINGS,
    )


def test_demand_creates_boots_goes_idle_and_scales_down(conn: sqlite3.Connection, clock: Clock) -> None:
    platform = FakePlatform(clock, boot_delay_s=10)
    scaler = make(conn, platform, clock)
    work = [demand(tasks=2)]

    scaler.tick(work)
    assert platform.created == ["cpu-1", "cpu-2"]
    (status,) = scaler.status()
    assert status.slices_by_state["CREATING"] == 2
    assert "scaling up 2 slice(s): 2 pending task(s) need 2 slice(s)" in status.status

    clock.now += 5
    scaler.tick(work)
    assert platform.created == ["cpu-1", "cpu-2"], "booting slices absorb the same demand"

    clock.now += 6  # booted; the scheduler placed both tasks
    scaler.tick([], {"cpu-1": 1, "cpu-2": 1})
    assert scaler.status()[0].slices_by_state["READY"] == 2

    clock.now += 10  # tasks done
    scaler.tick([], {})
    clock.now += 59
    scaler.tick([], {})
    assert platform.terminated == [], "idle for 59s < 60s"
    assert "idle: slice cpu-1 idle 59s, removed after 60s" in scaler.status()[0].status

    clock.now += 1
    scaler.tick([], {})
    assert sorted(platform.terminated) == ["cpu-1", "cpu-2"]
    assert scaler.status()[0].slices == ()
    kinds = [a.action for a in scaler.actions()]
    assert kinds == [ActionKind.SCALE_UP] * 2 + [ActionKind.SLICE_READY] * 2 + [ActionKind.SCALE_DOWN] * 2
    assert scaler.status()[0].last_action.action is ActionKind.SCALE_DOWN


def test_busy_slice_survives_while_idle_sibling_goes(conn: sqlite3.Connection, clock: Clock) -> None:
    platform = FakePlatform(clock)
    scaler = make(conn, platform, clock)
    scaler.tick([demand(tasks=2)])
    clock.now += 1
    scaler.tick([], {"cpu-1"})  # a set of busy slice ids works too
    clock.now += 600
    scaler.tick([], {"cpu-1"})
    assert platform.terminated == ["cpu-2"]
    assert [s.slice_id for s in scaler.slices()] == ["cpu-1"]
    assert scaler.slices()[0].running_tasks == 1


def test_boot_failures_back_off_and_fall_through(conn: sqlite3.Connection, clock: Clock) -> None:
    platform = FakePlatform(clock, boot_delay_s=1)
    spot, ondemand = group("spot", priority=1), group("ondemand", priority=2)
    platform.inject("spot", fail_boots=10)
    scaler = make(conn, platform, clock, spot, ondemand)
    work = [demand(tasks=1)]
    for _ in range(3):  # create, fail, terminate and retry until the threshold (3) is reached
        scaler.tick(work)
        clock.now += 2
    scaler.tick(work)
    statuses = {s.name: s for s in scaler.status()}
    assert statuses["spot"].in_backoff
    assert statuses["spot"].backoff_reason == "3 boot failures in 10m"
    assert "ondemand-1" in platform.created
    assert [c for c in platform.created if c.startswith("spot")] == ["spot-1", "spot-2", "spot-3"]
    kinds = [a.action for a in scaler.actions() if a.group == "spot"]
    assert kinds.count(ActionKind.BOOT_FAILED) == 3 and ActionKind.BACKOFF in kinds
    assert scaler.pending_hints()["/u/job"].startswith("waiting for scale group ondemand")

    clock.now += 61  # backoff over: the preferred group gets new demand again
    scaler.tick([demand("/u/next", tasks=1)], {"ondemand-1": 1})
    assert "spot-4" in platform.created


def test_create_errors_count_as_boot_failures(conn: sqlite3.Connection, clock: Clock) -> None:
    platform = FakePlatform(clock)
    platform.inject("cpu", create_errors=1)
    scaler = make(conn, platform, clock)
    scaler.tick([demand(tasks=1)])
    assert platform.created == []
    assert scaler.slices()[0].state is SliceState.FAILED
    clock.now += 1
    scaler.tick([demand(tasks=1)])
    kinds = [a.action for a in scaler.actions()]
    assert kinds[:3] == [ActionKind.SCALE_UP, ActionKind.CREATE_FAILED, ActionKind.BOOT_FAILED]
    assert "injected create failure" in scaler.actions()[1].reason
    assert platform.created == ["cpu-2"], "the failed slice is replaced under a new id"


def test_boot_timeout_terminates_a_hung_slice(conn: sqlite3.Connection, clock: Clock) -> None:
    platform = FakePlatform(clock)
    platform.inject("cpu", hang_boots=1)
    scaler = make(conn, platform, clock, group("cpu", max_slices=4, boot_timeout_s=30))
    scaler.tick([demand(tasks=1)])
    clock.now += 31
    scaler.tick([demand(tasks=1)])
    assert platform.terminated == ["cpu-1"]
    assert platform.created == ["cpu-1", "cpu-2"]
    timeout = next(a for a in scaler.actions() if a.action is ActionKind.BOOT_TIMEOUT)
    assert "not ready after 31s (limit 30s)" in timeout.reason


def test_reap_worker_terminates_its_slice(conn: sqlite3.Connection, clock: Clock) -> None:
    platform = FakePlatform(clock)
    scaler = make(conn, platform, clock, group("tpu", num_vms=2, max_slices=2))
    scaler.tick([demand(tasks=2, group_by="slice")])
    clock.now += 1
    scaler.tick([], {"tpu-1": 2})
    assert scaler.reap_worker("tpu-1-w1", "stopped answering") == ["tpu-1-w0", "tpu-1-w1"]
    assert platform.terminated == ["tpu-1"]
    assert scaler.reap_worker("nobody") == []
    reaped = scaler.actions()[-1]
    assert (reaped.action, reaped.slice_id, reaped.reason) == (
        ActionKind.REAPED,
        "tpu-1",
        "worker tpu-1-w1: stopped answering",
    )


def test_a_killed_slice_is_replaced(conn: sqlite3.Connection, clock: Clock) -> None:
    platform = FakePlatform(clock)
    scaler = make(conn, platform, clock, group("cpu", min_slices=1))
    scaler.tick()
    clock.now += 1
    scaler.tick()
    platform.kill_slice("cpu-1", "preempted")
    clock.now += 1
    scaler.tick()
    assert platform.terminated == ["cpu-1"]
    assert platform.created == ["cpu-1", "cpu-2"]
    failed = next(a for a in scaler.actions() if a.action is ActionKind.SLICE_FAILED)
    assert failed.reason == "slice failed: preempted"


def test_restart_adopts_slices_instead_of_recreating(conn: sqlite3.Connection, clock: Clock) -> None:
    platform = FakePlatform(clock)
    first = make(conn, platform, clock)
    first.tick([demand(tasks=2)])
    clock.now += 1
    first.tick([], {"cpu-1": 1, "cpu-2": 1})

    second = make(conn, platform, clock)  # a restarted controller: same database, same platform
    assert sorted(second.adopt()) == ["cpu-1", "cpu-2"]
    assert all(s.idle_since is None for s in second.slices())
    second.tick([], {"cpu-1": 1, "cpu-2": 1})
    assert platform.created == ["cpu-1", "cpu-2"]
    second.tick([demand(tasks=1)], {"cpu-1": 1, "cpu-2": 1})
    assert platform.created[-1] == "cpu-3", "slice ids continue after a restart"


def test_adopt_without_database_rows_keeps_platform_slices(tmp_path: Path, clock: Clock) -> None:
    platform = FakePlatform(clock)
    with sqlite3.connect(tmp_path / "old.sqlite3", isolation_level=None) as old:
        first = make(old, platform, clock)
        first.tick([demand(tasks=2)])
    with sqlite3.connect(tmp_path / "new.sqlite3", isolation_level=None) as new:
        second = make(new, platform, clock)
        assert sorted(second.adopt()) == ["cpu-1", "cpu-2"]
        second.tick([demand(tasks=3)])
        assert platform.created[2:] == ["cpu-3"], "a fresh database never reuses a live slice id"


def test_slices_of_removed_groups_are_terminated(conn: sqlite3.Connection, clock: Clock) -> None:
    platform = FakePlatform(clock)
    make(conn, platform, clock, group("old", min_slices=1)).tick()
    scaler = make(conn, platform, clock, group("new"))
    scaler.tick()
    assert platform.terminated == ["old-1"]
    assert any(a.action is ActionKind.UNKNOWN_GROUP for a in scaler.actions())


def test_action_log_is_bounded(conn: sqlite3.Connection, clock: Clock) -> None:
    platform = FakePlatform(clock)
    store = AutoscalerStore(conn, max_actions=5)
    scaler = Autoscaler([group("cpu", max_slices=20)], platform, store, clock, timings=TIMINGS)
    scaler.tick([demand(tasks=8)])
    assert len(scaler.actions(limit=100)) == 5
    assert [a.slice_id for a in scaler.actions(limit=2)] == ["cpu-7", "cpu-8"]


def test_unfittable_reason_uses_configured_groups(conn: sqlite3.Connection, clock: Clock) -> None:
    scaler = make(conn, FakePlatform(clock), clock)
    big = demand(cpu=64).resources
    assert scaler.unfittable_reason(big, []) == "cpu: needs 64 cpu per task, a machine has 1"
    assert scaler.unfittable_reason(demand().resources, []) is None
    assert scaler.group_names == frozenset({"cpu"})


def test_terminations_name_the_workers_that_go(conn: sqlite3.Connection, clock: Clock) -> None:
    platform = FakePlatform(clock)
    scaler = make(conn, platform, clock, group("pair", num_vms=2))
    scaler.tick([demand(tasks=2)])
    clock.now += 1
    scaler.tick([], {})
    clock.now += 61
    result = scaler.tick([], {})
    (terminate,) = result.terminates
    assert terminate.worker_ids == ("pair-1-w0", "pair-1-w1")


def test_terminate_all(conn: sqlite3.Connection, clock: Clock) -> None:
    platform = FakePlatform(clock)
    scaler = make(conn, platform, clock, group("cpu", min_slices=2))
    scaler.tick()
    assert scaler.terminate_all("cluster stopped") == ["cpu-1-w0", "cpu-2-w0"]
    assert sorted(platform.terminated) == ["cpu-1", "cpu-2"]
    assert scaler.slices() == []
    assert scaler.actions()[-1].reason == "cluster stopped"


def test_from_config(conn: sqlite3.Connection, clock: Clock) -> None:
    config = load_cluster_config(Path(__file__).resolve().parents[2] / "examples" / "multi-group.yaml")
    scaler = Autoscaler.from_config(
        config, FakePlatform(clock), AutoscalerStore(conn), controller_url="http://c"
    )
    assert [g.name for g in scaler.groups] == ["spot", "on-demand"]
    assert scaler.timings.scale_down_delay_s == 15
    scaler.tick([demand(tasks=2, group_by="slice")])
    assert [s.group for s in scaler.slices()] == ["on-demand"], "only on-demand slices hold a gang of 2"


def test_status_view_is_plain_json(conn: sqlite3.Connection, clock: Clock) -> None:
    platform = FakePlatform(clock)
    scaler = make(conn, platform, clock)
    scaler.tick([demand(tasks=1)])
    view = json.loads(json.dumps(scaler.status_view()))
    (group_view,) = view["groups"]
    assert group_view["name"] == "cpu"
    assert group_view["resources"]["cpu_millicores"] == 1000
    assert group_view["slices"][0]["state"] == "CREATING"
    assert group_view["last_action"]["action"] == "scale_up"
    assert view["actions"][0]["slice_id"] == "cpu-1"
    assert view["pending_hints"]["/u/job"].startswith("waiting for scale group cpu")


def test_a_quarantined_slice_is_replaced_then_released_when_its_tasks_are_gone(
    conn: sqlite3.Connection, clock: Clock
) -> None:
    platform = FakePlatform(clock)
    scaler = make(conn, platform, clock, group("cpu", min_slices=1, max_slices=1))
    scaler.tick()
    clock.now += 1
    scaler.tick([], {"cpu-1": 1})
    assert platform.created == ["cpu-1"]
    # Its worker is quarantined while a task still runs there: a replacement comes up at once
    # (even at max_slices: the quarantined slice no longer counts), the old slice stays.
    clock.now += 1
    scaler.tick([], {"cpu-1": 1}, quarantined={"cpu-1"})
    assert platform.created == ["cpu-1", "cpu-2"] and platform.terminated == []
    assert scaler.released_workers == []
    clock.now += 1
    scaler.tick([], {"cpu-1": 1, "cpu-2": 0}, quarantined={"cpu-1"})
    assert platform.created == ["cpu-1", "cpu-2"] and platform.terminated == []
    # Its last task ended: the slice goes, its workers are handed back for the controller to reap.
    clock.now += 1
    scaler.tick([], {"cpu-1": 0, "cpu-2": 0}, quarantined={"cpu-1"})
    assert platform.terminated == ["cpu-1"] and scaler.released_workers == ["cpu-1-w0"]
    released = next(a for a in scaler.actions() if a.action is ActionKind.REAPED)
    assert released.slice_id == "cpu-1" and released.reason.startswith("quarantined")
    clock.now += 1
    scaler.tick([], {"cpu-2": 0})
    assert platform.created == ["cpu-1", "cpu-2"] and scaler.released_workers == []
