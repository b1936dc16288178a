"""The watchdog of a worker daemon that died: process attempts die at once, containers run on (for a
restarted daemon to adopt) until the fencing deadline, and are then removed unless a new daemon has
taken over (its pid in the heartbeat) by then."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.conftest import wait_until

from iris.cluster.runtime.container import MANAGED_LABEL, container_name
from iris.cluster.runtime.pid_records import PidJournal, PidRecord
from iris.cluster.runtime.proc_table import boot_id, read_proc
from iris.cluster.worker import watchdog
from iris.testing import container_engine as engines
from iris.testing.images import BUSYBOX_IMAGE

pytestmark = pytest.mark.skipif(not engines.available(), reason="dockerd is not installed")


def _docker(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([engines.docker_cli(), *args], capture_output=True, text=True, timeout=60)


def _running(name: str) -> bool:
    return _docker("inspect", "--format", "{{.State.Running}}", name).stdout.strip() == "true"


@pytest.fixture
def sleepers() -> Iterator[list[subprocess.Popen[bytes]]]:
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for popen in started:
        popen.kill()
        popen.wait()


def _record(popen: subprocess.Popen[bytes], uid: str, *, container: bool) -> PidRecord:
    info = read_proc(popen.pid)
    assert info is not None
    return PidRecord(uid, popen.pid, info.start_ticks, boot_id(), container=container)


def _dead_daemon(
    state: Path, worker: str, sleepers: list[subprocess.Popen[bytes]], grace_s: float
) -> tuple[str, subprocess.Popen[bytes], subprocess.Popen[bytes]]:
    """A state dir as a daemon leaves it when killed: a process attempt, a container attempt (its
    launcher and its running container), and its last heartbeat (grace ``grace_s``)."""
    (state / "pids").mkdir(parents=True)
    name = container_name(worker, "c1")
    started = _docker(
        "run", "-d", "--rm", "--init", "--name", name, "--label", f"{MANAGED_LABEL}=true",
        "--label", f"iris.worker={worker}", "--label", "iris.attempt=c1", BUSYBOX_IMAGE, "sleep", "600",
    )  # fmt: skip
    assert started.returncode == 0, started.stderr
    process = subprocess.Popen(["sleep", "600"], start_new_session=True)
    launcher = subprocess.Popen(["sleep", "600"], start_new_session=True)
    sleepers += [process, launcher]
    journal = PidJournal(state / "pids")
    journal.started(_record(process, "p1", container=False))
    journal.started(_record(launcher, "c1", container=True))
    journal.close()
    beat = watchdog.Heartbeat(state)  # written as by the daemon (this process stands for it)
    beat.beat(time.monotonic(), grace_s)
    beat.close()
    return name, process, launcher


def test_a_dead_daemons_containers_run_until_the_fencing_deadline(
    container_engine: engines.Engine, tmp_path: Path, sleepers: list[subprocess.Popen[bytes]]
) -> None:
    worker = f"w-{uuid.uuid4().hex[:8]}"
    name, process, launcher = _dead_daemon(tmp_path, worker, sleepers, grace_s=2.0)
    try:
        started = time.monotonic()
        done = threading.Thread(
            target=watchdog._after_daemon, args=(tmp_path, worker, os.getpid(), 0.05, os.getpid())
        )
        done.start()
        # At once: the process attempt and the container's launcher die, the container does not.
        wait_until(lambda: process.poll() is not None and launcher.poll() is not None, what="both killed")
        assert _running(name)
        done.join(timeout=60)
        assert not done.is_alive()
        assert time.monotonic() - started >= 2.0  # not before the grace (plus a second) ran out
        wait_until(
            lambda: not _docker("ps", "-aq", "--filter", f"name={name}").stdout.strip(), what="removed"
        )
        assert (tmp_path / watchdog.FENCED_DIR / "c1").exists()  # a late daemon reports it fenced
    finally:
        _docker("rm", "-f", name)


def test_a_new_daemon_takes_over_before_the_deadline(
    container_engine: engines.Engine, tmp_path: Path, sleepers: list[subprocess.Popen[bytes]]
) -> None:
    worker = f"w-{uuid.uuid4().hex[:8]}"
    name, _, launcher = _dead_daemon(tmp_path, worker, sleepers, grace_s=30.0)
    try:
        done = threading.Thread(target=watchdog._after_daemon, args=(tmp_path, worker, 1, 0.05, os.getpid()))
        # The heartbeat names this process, not the dead daemon (pid 1 here): a new daemon wrote it.
        done.start()
        done.join(timeout=30)
        assert not done.is_alive()
        wait_until(lambda: launcher.poll() is not None, what="the launcher killed")
        assert _running(name)  # left to the new daemon
        assert not (tmp_path / watchdog.FENCED_DIR).exists()
    finally:
        _docker("rm", "-f", name)


def test_a_heartbeat_names_its_daemon(tmp_path: Path) -> None:
    beat = watchdog.Heartbeat(tmp_path)
    beat.beat(12.5, 5.0)
    beat.close()
    assert watchdog.read_heartbeat(tmp_path / watchdog.HEARTBEAT_FILE) == (12.5, 5.0, os.getpid())
    (tmp_path / watchdog.HEARTBEAT_FILE).write_text(json.dumps({"reconciled_at": 1.0, "fence_after_s": None}))
    assert watchdog.read_heartbeat(tmp_path / watchdog.HEARTBEAT_FILE) == (1.0, None, None)


def test_what_a_new_daemon_already_started_is_not_the_dead_ones(
    tmp_path: Path, sleepers: list[subprocess.Popen[bytes]]
) -> None:
    """A daemon restarted before the watchdog saw the first one die has written a new journal: its
    attempts (children of the new daemon, not orphans of the dead one) are left alone."""
    (tmp_path / "pids").mkdir()
    new_daemon = subprocess.Popen(["sh", "-c", "sleep 600 & echo $!; wait"], stdout=subprocess.PIPE)
    sleepers.append(new_daemon)
    assert new_daemon.stdout is not None
    child = int(new_daemon.stdout.readline())
    orphan = subprocess.Popen(["sleep", "600"], start_new_session=True)
    sleepers.append(orphan)
    info = read_proc(child)
    assert info is not None
    try:
        journal = PidJournal(tmp_path / "pids")
        journal.started(PidRecord("new", child, info.start_ticks, boot_id()))
        journal.started(_record(orphan, "old", container=False))
        journal.close()
        watchdog._after_daemon(tmp_path, "w-x", 1, 0.05, os.getpid())
        wait_until(lambda: orphan.poll() is not None, what="the dead daemon's attempt killed")
        assert read_proc(child) is not None and new_daemon.poll() is None
    finally:
        os.kill(child, signal.SIGKILL)
