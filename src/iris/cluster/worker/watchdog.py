"""A watchdog beside the worker daemon: kills its attempts when the daemon can no longer do it.

The daemon fences itself (fencing.py) while it runs. Two faults stop it from doing so: it is
stopped (SIGSTOP, a debugger) while its attempts, which are other processes, run on; or it died
(kill -9, OOM) and left processes its tasks started. This small process, in a session of its own,
reads the daemon's heartbeat (the monotonic time of the last successful reconcile and the fencing
grace, rewritten in place in ``<state>/heartbeat``) and, when the heartbeat is older than the
grace plus a second, SIGKILLs every attempt tree recorded in the pid journal
(``<state>/pids/journal``, see ``runtime/pid_records.py``) and removes their containers. It only
reads the journal: the daemon alone writes it, and it remembers in memory which attempts it has
fenced already.

When the daemon is gone, its process attempts are killed at once (their output pipes died with
it: nothing can take them over). Its container attempts lose their launchers (the ``docker run``
CLIs) but the containers run on in the engine, for a restarted daemon to adopt: the watchdog
keeps reading the heartbeat and removes them only at the fencing deadline (the last reconcile
plus the grace plus a second), unless a new daemon has taken over by then (its pid is in the
heartbeat). A heartbeat without a grace (the daemon was never told one) removes them at once.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import NamedTuple

from iris.cluster.runtime.container import ContainerTaskRuntime, default_cli
from iris.cluster.runtime.pid_records import PidRecord, kill_launchers, kill_leftover_trees, load_pid_records
from iris.cluster.runtime.proc_table import read_proc

HEARTBEAT_FILE = "heartbeat"
FENCED_DIR = "fenced"
_RECORD_BYTES = 128
_MARGIN_S = 1.0
# A `docker run` killed between the engine's create and start leaves a container that appears
# a moment later and never starts; a second sweep after this long catches it.
_CONTAINER_RESWEEP_S = 2.0


class Heartbeat:
    """The daemon's side: one fixed-size record rewritten in place (no new disk blocks needed)."""

    def __init__(self, state_dir: Path) -> None:
        self.path = state_dir / HEARTBEAT_FILE
        self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        self._last: tuple[float, float | None] | None = None
        self._pid = os.getpid()

    def beat(self, reconciled_at: float, fence_after_s: float | None) -> None:
        if (
            self._last is not None
            and abs(self._last[0] - reconciled_at) < 0.2
            and self._last[1] == fence_after_s
        ):
            return
        record = json.dumps(
            {"reconciled_at": reconciled_at, "fence_after_s": fence_after_s, "pid": self._pid}
        ).encode()
        try:
            os.pwrite(self._fd, record.ljust(_RECORD_BYTES), 0)
            self._last = (reconciled_at, fence_after_s)
        except OSError:
            pass  # the watchdog then sees an older heartbeat: it can only fence early, never late

    def close(self) -> None:
        os.close(self._fd)


class Beat(NamedTuple):
    reconciled_at: float  # monotonic
    fence_after_s: float | None
    pid: int | None  # the daemon that wrote it (None: an older version's heartbeat)


def read_heartbeat(path: Path) -> Beat | None:
    try:
        with open(path, "rb") as f:
            data = json.loads(f.read(_RECORD_BYTES).strip() or b"null")
        pid = data.get("pid")
        return Beat(float(data["reconciled_at"]), data["fence_after_s"], int(pid) if pid else None)
    except (OSError, ValueError, TypeError, KeyError, AttributeError):
        return None


def fence_deadline_passed(beat: Beat | None, margin_s: float = _MARGIN_S) -> bool:
    """Whether attempts started under this heartbeat must be gone by now (no grace known: yes)."""
    if beat is None or beat.fence_after_s is None:
        return True
    return time.monotonic() - beat.reconciled_at > beat.fence_after_s + margin_s


def fence(state_dir: Path, worker_id: str, done: set[PidRecord] | None = None) -> None:
    """Kill every recorded attempt, leaving a mark so the daemon reports them as fenced, not failed.

    Records in ``done`` (fenced by an earlier call; this call adds to it) are left alone: their
    trees were killed, and a mark made again after the daemon consumed it would be stale.
    """
    records = [
        record for record in load_pid_records(state_dir / "pids") if done is None or record not in done
    ]
    if not records:
        return
    marks = state_dir / FENCED_DIR
    marks.mkdir(mode=0o700, exist_ok=True)
    for record in records:
        (marks / record.attempt_uid).touch()
    kill_leftover_trees(state_dir / "pids", worker_id, records)
    remove_containers(worker_id, [record.attempt_uid for record in records])
    if done is not None:
        done.update(records)


def remove_containers(worker_id: str, attempt_uids: list[str], resweep_after_s: float = 0.0) -> None:
    """Remove the attempts' containers (a worker with no container engine has none)."""
    if not attempt_uids or shutil.which(default_cli()) is None:
        return
    runtime = ContainerTaskRuntime(worker_id)
    runtime.remove_attempts(attempt_uids)
    if resweep_after_s > 0:
        time.sleep(resweep_after_s)
        runtime.remove_attempts(attempt_uids)


def _left_behind(record: PidRecord, orphans_parent: int) -> bool:
    """Whether the record is the dead daemon's: its leader is gone, or is an orphan (re-parented to
    ``orphans_parent``), not the child of a new daemon."""
    info = read_proc(record.pgid)
    return info is None or info.start_ticks != record.start_ticks or info.ppid == orphans_parent


def start_watchdog(state_dir: Path, worker_id: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "iris.cluster.worker.watchdog", str(state_dir), worker_id, str(os.getpid())],
        stdin=subprocess.DEVNULL,
        start_new_session=True,  # a signal to the daemon's process group does not reach it
    )


def watch(state_dir: Path, worker_id: str, daemon_pid: int, interval_s: float = 0.5) -> int:
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))  # the daemon stopping us on a clean exit
    heartbeat = state_dir / HEARTBEAT_FILE
    fenced: set[PidRecord] = set()
    while True:
        if os.getppid() != daemon_pid:  # the daemon died
            return _after_daemon(state_dir, worker_id, daemon_pid, interval_s)
        beat = read_heartbeat(heartbeat)
        if beat is not None and beat.fence_after_s is not None and fence_deadline_passed(beat):
            fence(state_dir, worker_id, fenced)
        time.sleep(interval_s)


def _after_daemon(
    state_dir: Path, worker_id: str, daemon_pid: int, interval_s: float, orphans_parent: int | None = None
) -> int:
    """The daemon is gone: its process attempts die now; its containers stay until the fencing
    deadline, for a restarted daemon to adopt (see the module's docstring)."""
    pids_dir = state_dir / "pids"
    # Only what the dead daemon left: a daemon restarted meanwhile may have written a new journal
    # already. Its attempts' leaders are its own children; the dead one's were re-parented, like
    # this watchdog, to the same new parent (``orphans_parent``, for tests).
    parent = os.getppid() if orphans_parent is None else orphans_parent
    records = [record for record in load_pid_records(pids_dir) if _left_behind(record, parent)]
    kill_leftover_trees(pids_dir, worker_id, [record for record in records if not record.container])
    launched = [record for record in records if record.container]
    kill_launchers(launched)
    if not launched:
        return 0
    heartbeat = state_dir / HEARTBEAT_FILE
    while True:
        beat = read_heartbeat(heartbeat)
        if beat is not None and beat.pid not in (None, daemon_pid):
            return 0  # a new daemon has adopted (or removed) them; its own watchdog watches now
        if fence_deadline_passed(beat):
            marks = state_dir / FENCED_DIR
            marks.mkdir(mode=0o700, exist_ok=True)
            for record in launched:
                (marks / record.attempt_uid).touch()
            remove_containers(
                worker_id, [r.attempt_uid for r in launched], resweep_after_s=_CONTAINER_RESWEEP_S
            )
            return 0
        time.sleep(interval_s)


if __name__ == "__main__":
    sys.exit(watch(Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])))
