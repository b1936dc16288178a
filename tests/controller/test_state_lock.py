"""One controller per state dir: a second one (or `iris cluster start`) is refused at once with one
sentence naming the dir and the holder's pid; after the holder is killed -9 the dir is free."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.cli.helpers import IRIS
from tests.conftest import wait_until


def start_controller(state: Path, ready: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "iris.cluster.controller", "--port", "0", "--state-dir", str(state),
         "--ready-file", str(ready)],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True,
    )  # fmt: skip


@pytest.fixture
def procs() -> Iterator[list[subprocess.Popen[bytes]]]:
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for proc in started:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def test_a_second_controller_is_refused_and_a_killed_ones_dir_is_free(
    tmp_path: Path, procs: list[subprocess.Popen[bytes]]
) -> None:
    state = tmp_path / "state"
    first = start_controller(state, tmp_path / "first.ready")
    procs.append(first)
    wait_until(lambda: (tmp_path / "first.ready").exists(), timeout=60, what="the first controller")
    assert json.loads((tmp_path / "first.ready").read_text())["pid"] == first.pid

    started = time.monotonic()
    second = start_controller(state, tmp_path / "second.ready")
    procs.append(second)
    _, err = second.communicate(timeout=60)
    took = time.monotonic() - started
    assert second.returncode == 1
    lines = err.decode().strip().splitlines()
    assert lines == [
        f"error: the state dir {state} is in use by another controller (pid {first.pid}): stop it first, "
        "or give this one another state dir"
    ]
    assert took < 5, f"refused after {took:.1f}s: the lock must come before the heavy imports"
    assert first.poll() is None, "the first controller keeps running"

    # kill -9 leaves the lock file behind, but not the lock.
    os.killpg(first.pid, signal.SIGKILL)
    first.wait()
    third = start_controller(state, tmp_path / "third.ready")
    procs.append(third)
    wait_until(lambda: (tmp_path / "third.ready").exists(), timeout=60, what="a controller on the freed dir")
    assert third.poll() is None


def test_cluster_start_on_a_dir_in_use_is_one_sentence(
    tmp_path: Path, procs: list[subprocess.Popen[bytes]]
) -> None:
    holder = start_controller(tmp_path / "cluster" / "controller", tmp_path / "holder.ready")
    procs.append(holder)
    wait_until(lambda: (tmp_path / "holder.ready").exists(), timeout=60, what="the holding controller")
    result = subprocess.run(
        [*IRIS, "cluster", "start", "--local", "--port", "0", "--state-dir", str(tmp_path / "cluster")],
        capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert result.returncode == 1
    assert result.stderr.strip().splitlines() == [
        f"error: the state dir {tmp_path / 'cluster' / 'controller'} is in use by another controller "
        f"(pid {holder.pid}): stop it first, or give this one another state dir"
    ]
    assert holder.poll() is None
