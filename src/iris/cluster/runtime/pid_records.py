"""Pid records of running attempts, so a restarted worker can kill what its previous run left behind.

``<state>/pids/<attempt_uid>.json`` holds the attempt's process group id and the group leader's
start time (clock ticks since boot, plus the boot id). A leader pid that now belongs to another
process has a different start time and is left alone.
"""

from __future__ import annotations

import json
import logging
import os
import signal
from dataclasses import dataclass
from pathlib import Path

from iris.cluster.runtime.proc_table import boot_id, process_tree, read_environ, scan_process_table

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class PidRecord:
    attempt_uid: str
    pgid: int
    start_ticks: int
    boot_id: str


def write_pid_record(pids_dir: Path, record: PidRecord) -> None:
    path = pids_dir / f"{record.attempt_uid}.json"
    path.write_text(
        json.dumps(
            {
                "attempt_uid": record.attempt_uid,
                "pgid": record.pgid,
                "start_ticks": record.start_ticks,
                "boot_id": record.boot_id,
            }
        )
    )


def remove_pid_record(pids_dir: Path, attempt_uid: str) -> None:
    try:
        os.unlink(pids_dir / f"{attempt_uid}.json")
    except FileNotFoundError:
        pass


def load_pid_records(pids_dir: Path) -> list[PidRecord]:
    records = []
    for path in pids_dir.glob("*.json"):
        try:
            data = json.loads(path.read_text())
            records.append(
                PidRecord(
                    str(data["attempt_uid"]),
                    int(data["pgid"]),
                    int(data["start_ticks"]),
                    str(data["boot_id"]),
                )
            )
        except (OSError, ValueError, KeyError, TypeError):
            logger.warning("ignoring unreadable pid record %s", path)
            path.unlink(missing_ok=True)
    return records


def kill_leftover_trees(pids_dir: Path, worker_id: str) -> list[str]:
    """SIGKILL every process tree a previous run of this worker left running; returns their attempt uids.

    A tree is found two ways: from its recorded group leader (only if the leader's start time
    matches the record), and by scanning for processes whose environment names one of the leftover
    attempts AND this worker (catches processes that left the group or outlived their leader).
    """
    records = load_pid_records(pids_dir)
    if not records:
        return []
    current_boot = boot_id()
    table = scan_process_table()
    me = os.getpid()
    targets: set[int] = set()
    for record in records:
        leader = table.get(record.pgid)
        if record.boot_id == current_boot and leader is not None and leader.start_ticks == record.start_ticks:
            targets |= process_tree(table, record.pgid, record.pgid)
    uids = {record.attempt_uid for record in records}
    for pid in table:
        if pid == me or pid in targets:
            continue
        env = read_environ(pid)
        if env.get("IRIS_ATTEMPT_UID") in uids and env.get("IRIS_WORKER_ID") == worker_id:
            targets.add(pid)
    targets.discard(me)
    for pid in targets:
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    for record in records:
        remove_pid_record(pids_dir, record.attempt_uid)
    if targets:
        logger.warning(
            "killed %d leftover processes of %d attempts from a previous run", len(targets), len(records)
        )
    return sorted(uids)
