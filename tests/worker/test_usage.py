"""The usage sampler: CPU (reaped children included), RSS and peak of every live attempt, from one /proc scan."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator

import pytest
from tests.conftest import wait_until

from iris.cluster.runtime import proc_table
from iris.cluster.worker import usage as usage_module
from iris.cluster.worker.usage import UsageSampler

BURN = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.3: pass\n"


@pytest.fixture
def trees() -> Iterator[list[subprocess.Popen[bytes]]]:
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for popen in started:
        popen.kill()
        popen.wait()


def start_tree(trees: list[subprocess.Popen[bytes]], script: str) -> subprocess.Popen[bytes]:
    popen = subprocess.Popen(["sh", "-c", script], start_new_session=True)
    trees.append(popen)
    return popen


def test_cpu_of_reaped_children_and_rss_of_the_tree_are_counted(trees: list[subprocess.Popen[bytes]]) -> None:
    # The root runs a child that burns 0.3 s of CPU and exits (reaped by the root), then waits on a
    # child that stays: the attempt's CPU includes the burnt time, its RSS the live processes.
    root = start_tree(trees, f"{sys.executable} -c '{BURN}'; sleep 100")
    sampler = UsageSampler(lambda: [("a1", root.pid, root.pid)])

    def sampled_after_the_burn():
        sampler.sample()
        got = sampler.usage("a1")
        return got if got is not None and got.cpu_seconds >= 0.25 else None

    got = wait_until(sampled_after_the_burn, timeout=20, what="the burnt CPU to be sampled")
    assert got.rss_bytes > 0 and got.peak_rss_bytes >= got.rss_bytes and got.samples >= 1
    assert len(got.history) == 1  # the first sample is a history point


def test_one_process_table_scan_serves_every_attempt(
    trees: list[subprocess.Popen[bytes]], monkeypatch: pytest.MonkeyPatch
) -> None:
    roots = [start_tree(trees, "sleep 100") for _ in range(3)]
    live = [(f"a{i}", p.pid, p.pid) for i, p in enumerate(roots)]
    scans: list[int] = []

    def counting_scan() -> dict[int, proc_table.ProcInfo]:
        scans.append(1)
        return proc_table.scan_process_table()

    monkeypatch.setattr(usage_module, "scan_process_table", counting_scan)
    sampler = UsageSampler(lambda: live)
    # A new small process's RSS in /proc/<pid>/stat comes from per-CPU counters: it may read 0 at
    # first (Linux >= 6.2). Wait until every tree shows some.
    wait_until(
        lambda: all((info := proc_table.read_proc(p.pid)) is not None and info.rss_bytes > 0 for p in roots),
        what="trees started",
    )
    sampler.sample()
    assert len(scans) == 1
    assert all((u := sampler.usage(uid)) is not None and u.rss_bytes > 0 for uid, _, _ in live)
    live.clear()  # no live attempt: no scan at all
    sampler.sample()
    assert len(scans) == 1


def test_an_attempt_no_longer_live_keeps_its_totals_without_rss(trees: list[subprocess.Popen[bytes]]) -> None:
    root = start_tree(trees, "sleep 100")
    live = [("a1", root.pid, root.pid)]
    sampler = UsageSampler(lambda: live)
    # RSS may read 0 for a new small process at first (per-CPU counters): wait for a sample with some.
    wait_until(
        lambda: (sampler.sample(), (u := sampler.usage("a1")) is not None and u.rss_bytes > 0)[1],
        what="a first sample with memory",
    )
    first = sampler.usage("a1")
    assert first is not None and first.rss_bytes > 0
    live.clear()  # released by the runtime
    sampler.sample()
    after = sampler.usage("a1")
    assert after is not None and after.rss_bytes == 0
    assert after.peak_rss_bytes == first.peak_rss_bytes and after.samples == first.samples


def test_a_reaped_root_still_counts_its_group(trees: list[subprocess.Popen[bytes]]) -> None:
    # Root pid 0: the runtime has reaped the root, whose pid may now be another process's.
    leader = start_tree(trees, "sleep 100 & sleep 100")
    sampler = UsageSampler(lambda: [("a1", 0, leader.pid)])
    wait_until(
        lambda: sum(1 for info in proc_table.scan_process_table().values() if info.pgid == leader.pid) >= 3,
        what="the group's sleeps",
    )
    sampler.sample()
    got = sampler.usage("a1")
    assert got is not None and got.rss_bytes > 0
