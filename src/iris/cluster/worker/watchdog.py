"""A watchdog beside the worker daemon: kills its attempts when the daemon can no longer do it.

The daemon fences itself (fencing.py) while it runs. Two faults stop it from doing so: it is
stopped (SIGSTOP, a debugger) while its attempts, which are other processes, run on; or it died
(kill -9, OOM) and left processes its tasks started. This small process, in a session of its own,
reads the daemon's heartbeat (the monotonic time of the last successful reconcile and the fencing
grace, rewritten in place in ``<state>/heartbeat``) and, when the heartbeat is older than the
grace plus a second, or the daemon is gone, SIGKILLs every attempt tree recorded in the pid
journal (``<state>/pids/journal``, see ``runtime/pid_records.py``). It only reads the journal: the
daemon alone writes it, and it remembers in memory which attempts it has fenced already.
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

from iris.cluster.runtime.container import ContainerTaskRuntime, default_cli
from iris.cluster.runtime.pid_records import PidRecord, kill_leftover_trees, load_pid_records

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

    def beat(self, reconciled_at: float, fence_after_s: float | None) -> None:
        if (
            self._last is not None
            and abs(self._last[0] - reconciled_at) < 0.2
            and self._last[1] == fence_after_s
        ):
            return
        record = json.dumps({"reconciled_at": reconciled_at, "fence_after_s": fence_after_s}).encode()
        try:
            os.pwrite(self._fd, record.ljust(_RECORD_BYTES), 0)
            self._last = (reconciled_at, fence_after_s)
        except OSError:
            pass  # the watchdog then sees an older heartbeat: it can only fence early, never late

    def close(self) -> None:
        os.close(self._fd)


def read_heartbeat(path: Path) -> tuple[float, float | None] | None:
    try:
        with open(path, "rb") as f:
            data = json.loads(f.read(_RECORD_BYTES).strip() or b"null")
        return float(data["reconciled_at"]), data["fence_after_s"]
    except (OSError, ValueError, TypeError, KeyError):
        return None


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


def start_watchdog(state_dir: Path, worker_id: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "iris.cluster.worker.watchdog", str(state_dir), worker_id, str(os.getpid())],
        stdin=subprocess.DEVNULL,
        start_new_session=True,  # a signal to the daemon's process group does not reach it
    )


def watch(state_dir: Path, worker_id: str, daemon_pid: int, interval_s: float = 0.5) -> int:
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))  # the daemon stopping us on a clean exit
    pids_dir = state_dir / "pids"
    heartbeat = state_dir / HEARTBEAT_FILE
    fenced: set[PidRecord] = set()
    while True:
        if os.getppid() != daemon_pid:  # the daemon died: nothing of its attempts may outlive it
            killed = kill_leftover_trees(pids_dir, worker_id)
            remove_containers(worker_id, killed, resweep_after_s=_CONTAINER_RESWEEP_S)
            return 0
        beat = read_heartbeat(heartbeat)
        if beat is not None:
            reconciled_at, grace = beat
            if grace is not None and time.monotonic() - reconciled_at > grace + _MARGIN_S:
                fence(state_dir, worker_id, fenced)
        time.sleep(interval_s)


if __name__ == "__main__":
    sys.exit(watch(Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])))
