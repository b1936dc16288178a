"""One cheap pass over /proc: pid -> (ppid, pgid, rss, start time, CPU time), and tree queries over it.

The memory monitor samples every running attempt from ONE scan per tick, and so does the usage
sampler, so reading ``/proc/<pid>/stat`` directly (one small read per process) beats asking
psutil per process (whose ``children()`` reads all of /proc again for every attempt).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from typing import NamedTuple

_PAGE_SIZE = os.sysconf("SC_PAGE_SIZE")
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
_O_RDONLY = os.O_RDONLY | os.O_CLOEXEC


class ProcInfo(NamedTuple):
    """One process's stat line. A tuple: the monitor and the usage sampler build one per process of
    the machine several times a second, and a frozen dataclass costs twice as much to build."""

    pid: int
    ppid: int
    pgid: int
    rss_bytes: int
    # Clock ticks since boot at which the process started: with the pid, a process identity.
    start_ticks: int
    # "Z" for a zombie: dead, only waiting for its parent to reap it.
    state: str = "R"
    # CPU time (user + system, clock ticks) of the process, and of its children it has reaped.
    cpu_ticks: int = 0
    reaped_children_cpu_ticks: int = 0

    @property
    def dead(self) -> bool:
        return self.state in ("Z", "X")


ProcTable = Mapping[int, ProcInfo]


def read_proc(pid: int) -> ProcInfo | None:
    """The stat line of one process, or None if it is gone.

    One ``open``/``read``/``close`` of the raw file (no file object): this runs for every process
    of the machine at each monitor tick and usage sample, and at every attempt's start.
    """
    try:
        fd = os.open(f"/proc/{pid}/stat", _O_RDONLY)
    except OSError:
        return None
    try:
        raw = os.read(fd, 4096)
    except OSError:
        return None
    finally:
        os.close(fd)
    # The command name may contain spaces and parentheses: fields start after the LAST ')'.
    # Only the first 22 fields are used (up to rss); the rest stay unsplit.
    fields = raw[raw.rfind(b")") + 2 :].split(None, 22)
    try:
        return ProcInfo(
            pid,
            int(fields[1]),
            int(fields[2]),
            int(fields[21]) * _PAGE_SIZE,
            int(fields[19]),
            fields[0].decode(),
            int(fields[11]) + int(fields[12]),
            int(fields[13]) + int(fields[14]),
        )
    except (IndexError, ValueError):
        return None


def scan_process_table() -> dict[int, ProcInfo]:
    table: dict[int, ProcInfo] = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            info = read_proc(int(name))
            if info is not None:
                table[info.pid] = info
    return table


def boot_id() -> str:
    """Changes at every reboot: start ticks from another boot never identify a live process."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            return f.read().strip()
    except OSError:
        return ""


def process_tree(table: ProcTable, root_pid: int, pgid: int) -> set[int]:
    """Every live process of an attempt: its process group plus all descendants of its root."""
    children: dict[int, list[int]] = {}
    members: list[int] = []
    for info in table.values():
        children.setdefault(info.ppid, []).append(info.pid)
        if info.pgid == pgid:
            members.append(info.pid)
    found: set[int] = set()
    stack = [root_pid, *members] if root_pid in table else members
    while stack:
        pid = stack.pop()
        if pid in found:
            continue
        found.add(pid)
        stack.extend(children.get(pid, ()))
    return found


def tree_rss(table: ProcTable, pids: Iterable[int]) -> int:
    return sum(table[pid].rss_bytes for pid in pids if pid in table)


def signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def signal_identified(targets: Mapping[int, int], sig: int) -> None:
    """Signal pids whose start time still matches: a reused pid is never hit."""
    for pid, start_ticks in targets.items():
        info = read_proc(pid)
        if info is not None and info.start_ticks == start_ticks:
            try:
                os.kill(pid, sig)
            except (ProcessLookupError, PermissionError):
                pass


def group_alive(pgid: int) -> bool:
    """Does any process of the group still run? Zombies (killed, not yet reaped by their parent) do not."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return any(info.pgid == pgid and not info.dead for info in scan_process_table().values())


def pipe_holders(inodes: set[int]) -> set[int]:
    """Processes holding an fd on one of these pipes (finds escapees that left the tree)."""
    wanted = {f"pipe:[{inode}]" for inode in inodes}
    me = os.getpid()
    holders: set[int] = set()
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == me:
            continue
        fd_dir = f"/proc/{name}/fd"
        try:
            fds = os.listdir(fd_dir)
        except OSError:
            continue
        for fd in fds:
            try:
                if os.readlink(f"{fd_dir}/{fd}") in wanted:
                    holders.add(int(name))
                    break
            except OSError:
                continue
    return holders


def process_uids(pid: int) -> tuple[int, ...]:
    """The real, effective, saved and filesystem uids of a process (from ``status``, which stays
    readable whatever the process did to its environment or dumpable flag); () if it is gone."""
    try:
        fd = os.open(f"/proc/{pid}/status", _O_RDONLY)
    except OSError:
        return ()
    try:
        raw = os.read(fd, 8192)
    except OSError:
        return ()
    finally:
        os.close(fd)
    start = raw.find(b"\nUid:")
    if start < 0:
        return ()
    line = raw[start + 5 : raw.find(b"\n", start + 1)]
    try:
        return tuple(int(x) for x in line.split())
    except ValueError:
        return ()


def uid_processes(uids: set[int], exclude: int | None = None) -> dict[int, int]:
    """Every live (not zombie) process running under one of ``uids`` in any of its real, effective
    or saved uid: pid -> start ticks. Finds a process however it detached (``setsid``, closed output,
    ``env -i``): a task uid is only ever the attempt's own."""
    found: dict[int, int] = {}
    if not uids:
        return found
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        pid = int(name)
        if pid == exclude:
            continue
        ids = process_uids(pid)
        if not ids or not uids.intersection(ids[:3]):
            continue
        info = read_proc(pid)
        if info is not None and not info.dead:
            found[pid] = info.start_ticks
    return found


def read_environ(pid: int) -> dict[str, str]:
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            raw = f.read()
    except OSError:
        return {}
    env: dict[str, str] = {}
    for item in raw.split(b"\0"):
        key, sep, value = item.partition(b"=")
        if sep:
            env[key.decode(errors="replace")] = value.decode(errors="replace")
    return env
