"""Users cannot reach each other's tasks: each attempt runs as an unprivileged uid of its own.

When the worker runs as root, every attempt gets a uid (and the same gid) leased from a range
(default 200000-299999; no /etc/passwd entry is needed), its working directory is owned by that
uid with mode 0700, and it starts through::

    unshare --mount --propagation private -- sh -c 'mount -t proc -o hidepid=2 proc /proc && exec setpriv ...'

so in its private mount namespace ``/proc`` lists only its own processes, and ``setpriv`` drops
to the uid with no supplementary groups and ``no_new_privs`` (setuid binaries gain nothing).
A worker daemon makes that mount namespace once, for itself (``reexec_with_private_proc`` at
start-up: root still sees every process there); its attempts are born in it and then start
through ``setpriv`` alone, one exec instead of four (the mount cost ~8 ms per attempt).
A task cannot read another task's (or the worker's) ``/proc/PID/environ``: different uid, and
not even listed. Leases are ``flock``-ed files in a root-only directory shared by every worker on
the machine, so two workers never hand out the same uid at once; a lease dies with the worker.
A lease given back first deletes what its uid left in the shared temporary directories (and its
System V IPC objects): the next holder of the uid may be another user. A lease file says whether
its uid was given back cleanly; one whose holder died is cleaned (its processes killed, its
leftovers removed) by the next worker that leases it, before any attempt gets it.

Not covered (no containers): the filesystem outside the work dirs is shared read-only as usual
Unix permissions allow, the network is shared, and CPU and memory are only limited by the
worker's monitor.
"""

from __future__ import annotations

import ctypes
import fcntl
import hashlib
import logging
import os
import random
import shutil
import signal
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from iris.cluster.runtime.proc_table import signal_identified, uid_processes

logger = logging.getLogger(__name__)

DEFAULT_UID_RANGE = (200_000, 299_999)
_LEASE_DIRS = (Path("/run/iris/task-uids"), Path("/var/lib/iris/task-uids"))
_FALLBACK_TASK_ROOT = Path("/var/lib/iris/tasks")
_MOUNT_PROC = 'mount -t proc -o hidepid=2 proc /proc && exec "$@"'


class IsolationError(Exception):
    """The attempt cannot be isolated (no free uid); one sentence."""


@dataclass(frozen=True, slots=True)
class UidLease:
    uid: int
    fd: int


class UidPool:
    """Leases uids from ``[first, last]``: one flock-ed lease file per uid in a root-only directory."""

    def __init__(self, first: int, last: int, lease_dir: Path) -> None:
        self.first, self.last = first, last
        self.lease_dir = lease_dir
        _private_dir(lease_dir)

    def acquire(self) -> UidLease:
        span = self.last - self.first + 1
        start = random.randrange(span)  # workers on one machine rarely probe the same uids first
        for step in range(span):
            uid = self.first + (start + step) % span
            fd = os.open(self.lease_dir / str(uid), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                os.close(fd)
                continue
            if os.pread(fd, 1, 0) == _IN_USE:
                # Its last holder (a worker killed with -9, a crash) never gave it back cleanly:
                # what that attempt left (processes, temp files) must not meet the next one.
                logger.warning(
                    "task uid %d was not given back cleanly: killing and removing what it left", uid
                )
                kill_processes_of(uid)
                remove_leftovers_of(uid)
            os.pwrite(fd, _IN_USE, 0)
            return UidLease(uid, fd)
        raise IsolationError(f"every task uid in {self.first}-{self.last} is in use on this machine")

    def acquire_uid(self, uid: int) -> UidLease | None:
        """Lease this uid (one a restarted worker's adopted attempt still runs as); None if it is
        outside the pool or leased already."""
        if not self.first <= uid <= self.last:
            return None
        fd = os.open(self.lease_dir / str(uid), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            return None
        # Not cleaned as a dead holder's uid would be: the adopted container still runs as it.
        os.pwrite(fd, _IN_USE, 0)
        return UidLease(uid, fd)

    @staticmethod
    def release(lease: UidLease) -> None:
        """Give ``lease`` back (the caller has made sure no process of its uid is left), after
        removing what the uid left where every uid may write, so the next holder cannot read it."""
        remove_leftovers_of(lease.uid)
        try:
            os.pwrite(lease.fd, _CLEAN, 0)
            os.close(lease.fd)  # closing drops the flock
        except OSError:
            pass


@dataclass(frozen=True)
class Isolation:
    """How this worker isolates attempts; ``None`` from ``detect`` when it cannot (not root)."""

    pool: UidPool
    # Where work dirs and shared environments live: every ancestor is traversable by task uids.
    task_root: Path
    unshare: str
    setpriv: str
    mount: str
    sh: str
    # This process already sees /proc mounted hidepid=2 (the daemon's own mount namespace):
    # attempts inherit it, no per-attempt namespace is needed.
    proc_hidden: bool = False

    @classmethod
    def detect(
        cls, state_dir: Path, uid_range: tuple[int, int] | None = DEFAULT_UID_RANGE
    ) -> Isolation | None:
        if uid_range is None or os.geteuid() != 0:
            return None
        tools = {name: shutil.which(name) for name in ("unshare", "setpriv", "mount", "sh")}
        missing = [name for name, path in tools.items() if path is None]
        if missing:
            logger.warning(
                "running as root but %s not found: attempts run as root, NOT isolated from each other",
                ", ".join(missing),
            )
            return None
        lease_dir = next((d for d in _LEASE_DIRS if _creatable(d)), None)
        if lease_dir is None:
            logger.warning("no directory for task uid leases: attempts run as root, NOT isolated")
            return None
        return cls(
            pool=UidPool(*uid_range, lease_dir),
            task_root=task_root_for(state_dir),
            unshare=str(tools["unshare"]),
            setpriv=str(tools["setpriv"]),
            mount=str(tools["mount"]),
            sh=str(tools["sh"]),
            proc_hidden=proc_is_hidden(),
        )

    def wrap(self, argv: Sequence[str], uid: int) -> list[str]:
        """``argv`` run as ``uid`` in a private mount namespace whose /proc hides other users."""
        if self.proc_hidden:
            return [*self.drop(uid), *argv]
        return [
            self.unshare,
            "--mount",
            "--propagation",
            "private",
            "--",
            self.sh,
            "-c",
            _MOUNT_PROC.replace("mount ", f"{self.mount} ", 1),
            "iris-task",
            *self.drop(uid),
            *argv,
        ]

    def drop(self, uid: int) -> list[str]:
        """Just the privilege drop (for exec beside a running attempt)."""
        return [
            self.setpriv,
            f"--reuid={uid}",
            f"--regid={uid}",
            "--clear-groups",
            "--no-new-privs",
            "--inh-caps=-all",
            "--pdeathsig=KILL",  # set after the uid change (which would clear it): dies with the worker
            "--",
        ]

    @staticmethod
    def hand_over(directory: str | Path, uid: int) -> None:
        """Make ``directory`` (and everything in it) the task's own, mode 0700 at the top."""
        for root, dirs, files in os.walk(directory):
            for name in (*dirs, *files):
                os.lchown(os.path.join(root, name), uid, uid)
        os.chown(directory, uid, uid)
        os.chmod(directory, 0o700)


def proc_is_hidden(mountinfo: Path = Path("/proc/self/mountinfo")) -> bool:
    """Whether /proc, as this process sees it, is mounted with hidepid=2 (``invisible``)."""
    try:
        lines = mountinfo.read_text().splitlines()
    except OSError:
        return False
    options = ""
    for line in lines:
        fields = line.split()
        if len(fields) > 4 and fields[4] == "/proc":
            options = line.rsplit(" ", 1)[-1]  # the last /proc mount is the one in effect
    return any(o in ("hidepid=2", "hidepid=invisible") for o in options.split(","))


_REEXEC_MARK = "IRIS_PRIVATE_PROC"


def reexec_with_private_proc() -> None:
    """Become this same process again inside a private mount namespace whose /proc hides other
    users' processes (root still sees all). Returns only when that is not possible, or done."""
    if os.geteuid() != 0 or proc_is_hidden() or os.environ.get(_REEXEC_MARK):
        return
    tools = [shutil.which(name) for name in ("unshare", "sh", "mount")]
    if None in tools:
        return
    unshare, sh, mount = (str(t) for t in tools)
    # If the mount fails the daemon still starts (marked, so it does not loop) and isolates each
    # attempt in a namespace of its own instead.
    script = f'{mount} -t proc -o hidepid=2 proc /proc; exec "$@"'
    # slave: mounts the host makes later (a new disk, an NFS share) still reach the tasks; ours
    # (the hidden /proc) never reach the host.
    argv = [
        unshare,
        "--mount",
        "--propagation",
        "slave",
        "--",
        sh,
        "-c",
        script,
        "iris-worker",
        sys.executable,
        *sys.orig_argv[1:],
    ]
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(unshare, argv, {**os.environ, _REEXEC_MARK: "1"})


def task_root_for(state_dir: Path) -> Path:
    """``<state>/tasks`` when task uids can traverse down to it, else a per-state-dir directory
    under /var/lib/iris/tasks (a state dir under /root or a 0700 temp dir is not traversable)."""
    state_dir = state_dir.resolve()
    if all(_others_can_traverse(p) for p in (state_dir, *state_dir.parents)):
        root = state_dir / "tasks"
    else:
        digest = hashlib.sha256(str(state_dir).encode()).hexdigest()[:16]
        for parent in (_FALLBACK_TASK_ROOT.parent, _FALLBACK_TASK_ROOT):
            parent.mkdir(mode=0o711, exist_ok=True)
            os.chmod(parent, 0o711)
        root = _FALLBACK_TASK_ROOT / digest
    root.mkdir(mode=0o711, parents=True, exist_ok=True)
    os.chmod(root, 0o711)
    return root


# Through a shell, as a task's own ``python`` would be found: the interpreter and Iris must be
# readable by task uids (an interpreter under /root, mode 0700, is not).
_PROBE = '"$0" -c "import os, iris.cluster.worker.callable_runner, cloudpickle; print(os.getuid())"'


def probe(isolation: Isolation, python: str = sys.executable) -> str | None:
    """Run the worker's interpreter isolated once; None when it works, else why not (one sentence)."""
    lease = isolation.pool.acquire()
    env = {k: v for k, v in os.environ.items() if k != "IRIS_TOKEN"}
    try:
        done = subprocess.run(
            isolation.wrap([isolation.sh, "-c", _PROBE, python], lease.uid),
            capture_output=True,
            text=True,
            timeout=60,
            cwd="/",
            env=env,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"cannot start an isolated process: {exc}"
    finally:
        UidPool.release(lease)
    if done.returncode != 0 or done.stdout.strip() != str(lease.uid):
        last = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
        return f"uid {lease.uid} cannot run {python} with Iris ({last[0][:200]})"
    return None


# A lease file's first byte: in use (its holder has not given it back, or died holding it), clean.
_IN_USE, _CLEAN = b"1", b"0"


def kill_processes_of(uid: int, attempts: int = 100) -> None:
    """SIGKILL every process of ``uid`` until none is left (a second or so at most)."""
    for _ in range(attempts):
        found = uid_processes({uid})
        if not found:
            return
        signal_identified(found, signal.SIGKILL)
        time.sleep(0.01)
    logger.warning("task uid %d still has processes after repeated SIGKILL", uid)


# Where any uid may create files that outlive its processes (sticky, world-writable).
SHARED_TEMP_DIRS = (Path("/tmp"), Path("/var/tmp"), Path("/dev/shm"))
_SCRUB_DEPTH = 8
_IPC_RMID = 0
# /proc/sysvipc file -> (the id's column, the owner's columns, the libc call that removes one)
_SYSV_IPC = {"shm": (1, (7, 9), "shmctl"), "msg": (1, (7, 9), "msgctl"), "sem": (1, (4, 6), "semctl")}


def remove_leftovers_of(uid: int, roots: Sequence[Path] = SHARED_TEMP_DIRS) -> None:
    """Delete every file and directory ``uid`` owns in the shared temporary directories (and in
    root's world-writable directories under them), and its System V IPC objects. A task's /tmp files
    (even mode 0600) would otherwise belong to the next attempt, of another user, leased that uid.
    Call only when no process of ``uid`` is left (nothing can race the removal)."""
    for root in roots:
        try:
            fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
        except OSError:
            continue
        try:
            _scrub(fd, uid, 0)
        except OSError as exc:
            logger.warning("could not remove the files task uid %d left in %s: %s", uid, root, exc)
        finally:
            os.close(fd)
    _remove_sysv_ipc(uid)


@dataclass(frozen=True)
class _Listing:
    """What a shared temporary directory held when last listed in full."""

    changed_ns: int  # its ctime then: any entry added, removed or renamed since changes it
    owners: frozenset[int]  # the uids owning its entries
    shared: tuple[str, ...]  # its root-owned world-writable subdirectories (scrubbed in turn)


# (st_dev, st_ino) -> listing. A release on a busy worker lists /tmp, and stat-ing each of its
# entries costs ~4 us: 3.5 ms a release with 800 entries. Unchanged since a full listing in which
# ``uid`` owned nothing, a directory needs no second look. Only a ctime older than the listing by
# this much is trusted: a change in the same clock tick as the listing would keep the same ctime.
_listings: dict[tuple[int, int], _Listing] = {}
_listings_lock = threading.Lock()
_SETTLED_NS = 1_000_000_000


def _scrub(dir_fd: int, uid: int, depth: int) -> None:
    here = os.fstat(dir_fd)
    key = (here.st_dev, here.st_ino)
    with _listings_lock:
        known = _listings.get(key)
    if known is not None and known.changed_ns == here.st_ctime_ns and uid not in known.owners:
        shared = known.shared
    else:
        shared = _scrub_listing(dir_fd, uid, key, here.st_ctime_ns)
    if depth >= _SCRUB_DEPTH:
        return
    for name in shared:
        try:
            sub = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=dir_fd)
        except OSError:
            continue  # gone meanwhile
        try:
            _scrub(sub, uid, depth + 1)
        except OSError:
            pass
        finally:
            os.close(sub)


def _scrub_listing(dir_fd: int, uid: int, key: tuple[int, int], changed_ns: int) -> tuple[str, ...]:
    """Remove ``uid``'s entries of one directory (stat-ing every entry); its shared subdirectories.
    The listing is remembered when nothing was removed and the directory had settled."""
    listed_ns = time.time_ns()
    with os.scandir(dir_fd) as entries:
        found = list(entries)
    owners: set[int] = set()
    shared: list[str] = []
    removed = False
    for entry in found:
        try:
            info = entry.stat(follow_symlinks=False)
            if info.st_uid == uid:
                removed = True
                if stat.S_ISDIR(info.st_mode):
                    shutil.rmtree(entry.name, dir_fd=dir_fd)  # fd-based: never follows a link
                else:
                    os.unlink(entry.name, dir_fd=dir_fd)
                continue
            owners.add(info.st_uid)
            if (
                stat.S_ISDIR(info.st_mode)
                and info.st_mode & stat.S_IWOTH
                and info.st_uid == 0  # the system's (.X11-unix); not a tree another task made to slow this
            ):
                shared.append(entry.name)
        except OSError:
            continue  # gone meanwhile (another uid's file), or not ours to remove
    if not removed and listed_ns - changed_ns > _SETTLED_NS:
        with _listings_lock:
            _listings[key] = _Listing(changed_ns, frozenset(owners), tuple(shared))
    return tuple(shared)


def _remove_sysv_ipc(uid: int) -> None:
    """Remove the shared memory segments, message queues and semaphores ``uid`` owns or created."""
    libc = None
    for kind, (id_column, owner_columns, call) in _SYSV_IPC.items():
        try:
            rows = Path(f"/proc/sysvipc/{kind}").read_text().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            fields = row.split()
            try:
                if not any(int(fields[c]) == uid for c in owner_columns):
                    continue
                ipc_id = int(fields[id_column])
            except (IndexError, ValueError):
                continue
            if libc is None:
                libc = ctypes.CDLL(None, use_errno=True)
            args = (ipc_id, 0, _IPC_RMID, None) if call == "semctl" else (ipc_id, _IPC_RMID, None)
            if getattr(libc, call)(*args) != 0:
                logger.warning("could not remove %s %d of task uid %d", kind, ipc_id, uid)


def _others_can_traverse(path: Path) -> bool:
    try:
        return bool(os.stat(path).st_mode & stat.S_IXOTH)
    except OSError:
        return False


def _creatable(directory: Path) -> bool:
    try:
        _private_dir(directory)
        return True
    except OSError:
        return False


def _private_dir(directory: Path) -> None:
    """A root-owned directory with mode 0700 (refuses a symlink or another owner)."""
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    info = os.lstat(directory)
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.geteuid():
        raise OSError(f"{directory} is not a directory owned by this user")
    os.chmod(directory, 0o700)
