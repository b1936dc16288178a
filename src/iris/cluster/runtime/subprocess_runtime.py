"""Runs task attempts as local process trees: one process group per attempt, whole-tree kills,
memory and time limits, JSON-lines logs, and a callback on every state change.

Threads: one ``IoLoop`` (all pipes and exits), one monitor (memory, timeouts, kill escalation,
release checks, retention), shared by every attempt. ``start`` runs on the caller's thread.
"""

from __future__ import annotations

import base64
import logging
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol

from iris.cluster.runtime.attempt_env import allocate_ports, build_attempt_env, coordinator_port_in_use
from iris.cluster.runtime.attempt_log import (
    DEFAULT_MAX_LOG_BYTES,
    AttemptLogWriter,
    LineIndex,
    attempt_log_path,
    count_output_lines,
    logged_attempt,
    read_log_page,
    remove_log,
    rotated_paths,
)
from iris.cluster.runtime.disk import (
    MIN_FREE_DISK_BYTES,
    MIN_FREE_INODES,
    DiskView,
    decide_disk,
    dir_usage_and_entries,
    free_inodes,
)
from iris.cluster.runtime.exec_path import resolve_executable
from iris.cluster.runtime.inspect import describe_processes, run_beside
from iris.cluster.runtime.io_loop import IoLoop
from iris.cluster.runtime.isolation import Isolation, UidLease, UidPool
from iris.cluster.runtime.pid_records import (
    PidJournal,
    PidRecord,
    kill_launchers,
    kill_leftover_trees,
    load_pid_records,
)
from iris.cluster.runtime.policy import KillReason, LimitView, decide_enforcements, final_outcome
from iris.cluster.runtime.private_state import TASK_UMASK
from iris.cluster.runtime.proc_table import (
    ProcTable,
    boot_id,
    group_alive,
    pipe_holders,
    process_tree,
    read_proc,
    scan_process_table,
    signal_group,
    signal_identified,
    tree_rss,
    uid_processes,
)
from iris.cluster.runtime.profiling import container_task_pid
from iris.cluster.runtime.task_runtime import Adoption, Launch, LeftAttempt, TaskRuntime
from iris.rpc.enums import TERMINAL_TASK_STATES, TaskState
from iris.rpc.errors import FailedPrecondition, NotFound
from iris.rpc.models import AttemptObservation, LogLine, LogsResponse, RunSpec

logger = logging.getLogger(__name__)

# Attempt uids become directory names: only plain names are accepted.
SAFE_UID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
CALLABLE_RUNNER_MODULE = "iris.cluster.worker.callable_runner"
_READ_CHUNK = 65536
STARTER_THREADS = 4
_LINE_INDEXES_KEPT = 256
# New logs and ends remembered for ``attempts_changed_since``; a reader further behind gets them all.
_CHANGES_KEPT = 8192
# Finished attempts' small logs kept for ``take_finished_log`` (at most SMALL_LOG_BYTES each).
_SMALL_LOGS_KEPT = 256
# A container attempt's own processes are sampled once it has run this long (a CLI call each).
CONTAINER_USAGE_AFTER_S = 1.0


_devnull_fd = -1
_devnull_lock = threading.Lock()


def _spawn_piped(
    popen: Callable[..., subprocess.Popen[bytes]], argv: list[str], args: dict[str, Any]
) -> tuple[subprocess.Popen[bytes], int, int]:
    """Start ``argv`` in a session of its own, stdin /dev/null, stdout and stderr into new pipes
    (through ``popen``: Popen itself or a spawner thread's); returns it and the pipes' read ends.
    The write ends are closed here whatever happens, the read ends too if it did not start."""
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    try:
        started = popen(argv, stdin=_devnull(), stdout=out_w, stderr=err_w, start_new_session=True, **args)
    except BaseException:
        os.close(out_r)
        os.close(err_r)
        raise
    finally:
        os.close(out_w)
        os.close(err_w)
    return started, out_r, err_r


def _devnull() -> int:
    """A descriptor of /dev/null kept open for the life of the process, every attempt's stdin:
    ``subprocess.DEVNULL`` opens and closes /dev/null at every start. Close-on-exec; ``Popen``
    duplicates it onto the child's fd 0 and never closes a descriptor it was handed."""
    global _devnull_fd
    if _devnull_fd < 0:
        with _devnull_lock:
            if _devnull_fd < 0:
                _devnull_fd = os.open(os.devnull, os.O_RDWR | os.O_CLOEXEC)
    return _devnull_fd


# The PATH of a profiler the worker runs itself (never the task's).
_PROFILER_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


class PreparationError(Exception):
    """The BUILDING phase failed; the message is one sentence for the task log and the attempt's error."""


@dataclass(frozen=True, slots=True)
class Preparation:
    """What the BUILDING phase produced for the process: extra env (set last, over the job's),
    directories to put first on PATH, and the Python that runs a callable entrypoint."""

    env: Mapping[str, str] = field(default_factory=dict)
    path_prepend: tuple[str, ...] = ()
    python: str | None = None


class Preparer(Protocol):
    """Gets an attempt's working directory ready (fetch its bundle, build its environment)."""

    def needed(self, spec: RunSpec) -> bool: ...

    def prepare(
        self, spec: RunSpec, work_dir: Path, log: Callable[[str], None], cancelled: Callable[[], bool]
    ) -> Preparation:
        """Runs on the attempt's own thread; raises PreparationError, or anything once ``cancelled()``."""
        ...


class DeviceBroker(Protocol):
    """Gives each attempt its own accelerators (as environment variables) until it is released."""

    def acquire(self, spec: RunSpec) -> Mapping[str, str]:
        """The env that gives the attempt its devices; raises (one sentence) when they are not free."""
        ...

    def release(self, attempt_uid: str) -> None:
        """Idempotent: the attempt's process tree is gone (or never started)."""
        ...


class _Attempt:
    """Mutable record of one attempt; fields are guarded by the runtime's lock."""

    def __init__(self, uid: str, spec: RunSpec | None, log_path: str | None) -> None:
        self.uid = uid
        self.spec = spec
        # Paths are plain strings: pathlib costs microseconds per operation, several per attempt.
        self.log_path = log_path
        # Set when its work dir is made; the payload is where a callable entrypoint is written.
        self.work_dir: str | None = None
        self.payload: str | None = None
        self.lease: UidLease | None = None
        # Set once its process is being created: from then on a kill signals it instead of ending it.
        self.launching = False
        self.log: AttemptLogWriter | None = None
        self.state = TaskState.BUILDING
        self.exit_code: int | None = None
        self.error: str | None = None
        self.started_at: float | None = None
        self.finished_at: float | None = None
        self.released = False
        self.popen: subprocess.Popen[bytes] | None = None
        self.pgid = 0
        self.ports: dict[str, int] = {}
        self.open_fds: dict[int, Literal["stdout", "stderr"]] = {}
        self.returncode: int | None = None
        self.kill_reason: KillReason | None = None
        self.kill_message: str | None = None
        self.escalate_at: float | None = None
        self.deadline: float | None = None
        self.memory_limit = 0
        # Descendants seen outside the process group: pid -> start ticks (for safe signalling).
        self.outsiders: dict[int, int] = {}
        self.eof_deadline: float | None = None
        self.holders_killed = False
        self.env: dict[str, str] = {}
        # What runs it beyond a plain process group (a container); None: the process runtime.
        self.runtime: TaskRuntime | None = None
        # An adopted container's (it has no spec): its task and timeout, from the container's labels.
        self.task_id: str | None = None
        self.timeout_s: float | None = None
        self.adopted = False

    def snapshot(self) -> AttemptObservation:
        """What the worker reports about this attempt (the one observation type, worker to kernel)."""
        return AttemptObservation(
            attempt_uid=self.uid,
            state=self.state,
            exit_code=self.exit_code,
            error=self.error,
            started_at=self.started_at,
            finished_at=self.finished_at,
            runtime_released=self.released,
        )

    @property
    def terminal(self) -> bool:
        return self.state in TERMINAL_TASK_STATES


class _StartBatch:
    """Attempts of one ``start_many``, started in order by whichever runner takes the next one."""

    def __init__(self, attempts: list[_Attempt], start: Callable[[_Attempt], None]) -> None:
        self._waiting = deque(attempts)
        self._start = start
        self._lock = threading.Lock()
        self._left = len(attempts)
        self.done = threading.Event()  # set once every attempt is running or has failed to start

    def run(self) -> None:
        while True:
            try:
                attempt = self._waiting.popleft()
            except IndexError:
                return
            try:
                self._start(attempt)
            except Exception:  # noqa: BLE001 - one attempt's failure must not strand the rest of the batch
                logger.exception("starting attempt %s failed", attempt.uid)
            with self._lock:
                self._left -= 1
                if self._left == 0:
                    self.done.set()


class SubprocessRuntime:
    """Starts, watches and kills attempts: each runs in ``<state_dir>/work/<uid>/`` (under
    isolation ``<task root>/<uid>/work/``) and logs to ``<state_dir>/attempts/<uid>.jsonl``.

    One directory and one file per attempt, and no file in ``pids/`` (a line of the pid journal):
    on ext4 every new inode costs tens to hundreds of microseconds of CPU, and every deleted one
    makes the next creations dearer for a minute or more.

    ``on_change(attempt_uid)`` is called (from any runtime thread, keep it cheap) whenever an
    attempt's observable state changes: started, finished, or its process tree released.

    An attempt the ``preparer`` says needs preparing stays BUILDING on a thread of its own while
    the preparer works (it may take many seconds), then starts in the prepared work dir.
    """

    def __init__(
        self,
        state_dir: Path,
        *,
        worker_id: str,
        controller_url: str,
        on_change: Callable[[str], None] | None = None,
        base_env: Mapping[str, str] | None = None,
        kill_grace_s: float = 2.0,
        eof_grace_s: float = 1.0,
        monitor_interval_s: float = 0.15,
        keep_finished: int = 2000,
        preparer: Preparer | None = None,
        devices: DeviceBroker | None = None,
        isolation: Isolation | None = None,
        log_max_bytes: int = DEFAULT_MAX_LOG_BYTES,
        disk_check_interval_s: float = 5.0,
        min_free_disk_bytes: int = MIN_FREE_DISK_BYTES,
        containers: TaskRuntime | None = None,
    ) -> None:
        """``containers`` runs the attempts whose spec names an image (see task_runtime.py); the
        others run as today, with none of its hooks on their path.

        Under ``isolation`` processes are created on long-lived threads of their own: each gets
        ``PR_SET_PDEATHSIG``, which fires when the creating *thread* exits (a build thread, a
        request thread). Without isolation nothing is put between worker and task (an extra exec
        would double a short task's CPU), so the starting thread creates the process itself:
        the worker's watchdog kills every attempt tree when the worker dies."""
        self.state_dir = Path(state_dir)
        # Logs (and callable payloads), pid records, and (without isolation) work dirs: the worker's alone.
        self.attempts_dir = self.state_dir / "attempts"
        self.pids_dir = self.state_dir / "pids"
        self.tasks_dir = isolation.task_root if isolation is not None else self.state_dir / "work"
        private = [self.attempts_dir, self.pids_dir] + ([self.tasks_dir] if isolation is None else [])
        for directory in private:
            directory.mkdir(parents=True, exist_ok=True)
            os.chmod(directory, 0o700)
        self._attempts_path = str(self.attempts_dir)
        self._tasks_path = str(self.tasks_dir)
        self._fenced_path = str(self.state_dir / "fenced")
        self.worker_id = worker_id
        self.controller_url = controller_url
        self._on_change = on_change
        self._base_env = dict(os.environ if base_env is None else base_env)
        # The worker's own token must never reach a task (each task gets its job's token instead).
        self._base_env.pop("IRIS_TOKEN", None)
        self._kill_grace_s = kill_grace_s
        self._eof_grace_s = eof_grace_s
        self._monitor_interval_s = monitor_interval_s
        self._keep_finished = keep_finished
        self._preparer = preparer
        self._devices = devices
        self._isolation = isolation
        self._log_max_bytes = log_max_bytes
        self._disk_check_interval_s = disk_check_interval_s
        self._min_free_disk_bytes = min_free_disk_bytes
        self._next_disk_check = 0.0
        self._spawner = (
            ThreadPoolExecutor(max_workers=STARTER_THREADS, thread_name_prefix="iris-spawn")
            if isolation is not None
            else None
        )
        self._boot_id = boot_id()
        self._lock = threading.RLock()
        self._changed = threading.Condition(self._lock)
        self._attempts: dict[str, _Attempt] = {}
        # The attempts not yet released (a subset of ``_attempts``): what the monitor looks at,
        # without walking the thousands of finished ones retention keeps.
        self._unreleased: dict[str, _Attempt] = {}
        # Attempt dirs on disk, oldest first: retention deletes from the left.
        self._retained: deque[str] = deque()
        self._pinned: frozenset[str] = frozenset()
        self._closing = False
        self._line_indexes: dict[str, LineIndex] = {}
        # Every new attempt log and every end is numbered: uid -> the number of its latest one,
        # oldest first (a reader asks for what changed after the number it last saw, without
        # walking the thousands of attempts retention keeps).
        self._change_seq = 0
        self._changed_at: dict[str, int] = {}
        self._changes_forgotten = 0
        # The whole log of recently finished attempts whose log stayed small, until the log shipper
        # takes it (``take_finished_log``): oldest first, a few hundred at most.
        self._small_logs: dict[str, bytes] = {}

        # A previous run's process trees die (their output pipes died with it); its containers'
        # launchers die too, but the containers themselves run on in the engine, to be adopted.
        previous = load_pid_records(self.pids_dir)
        self.leftovers_killed = kill_leftover_trees(
            self.pids_dir, worker_id, [record for record in previous if not record.container]
        )
        kill_launchers([record for record in previous if record.container])
        self._containers = containers
        self._observers: ThreadPoolExecutor | None = None
        # (Only a worker whose state dir says it ever ran a container asks the engine: a CLI call costs.)
        self._containers_marker = self.state_dir / "containers-used"
        self._containers_marked = self._containers_marker.exists()
        adoption = (
            containers.adopt(self._tasks_path)
            if containers is not None and self._containers_marked
            else Adoption()
        )
        self.containers_removed = list(adoption.removed)
        self.containers_adopted: list[str] = []
        self._pids = PidJournal(self.pids_dir)  # a new journal: the previous run's trees are dead
        self._adopt_previous_logs()
        self._io = IoLoop(name=f"iris-io-{worker_id}")
        for left in adoption.running:
            try:
                self._adopt_container(left)
                self.containers_adopted.append(left.attempt_uid)
            except Exception:  # noqa: BLE001 - one container that cannot be adopted is removed
                logger.exception(
                    "could not adopt the container %s of attempt %s", left.name, left.attempt_uid
                )
                if self._containers is not None:
                    self._containers.release(left.attempt_uid)
                self.containers_removed.append(left.name)
        self._starters = ThreadPoolExecutor(max_workers=STARTER_THREADS, thread_name_prefix="iris-start")
        self._stop_monitor = threading.Event()
        self._monitor = threading.Thread(
            target=self._monitor_loop, name=f"iris-monitor-{worker_id}", daemon=True
        )
        self._monitor.start()

    # ------------------------------------------------------------------ public API

    def start(self, spec: RunSpec) -> AttemptObservation:
        """Start an attempt (idempotent per uid). Returns once the process is running or failed to
        start, or at once (BUILDING) when it needs preparing."""
        attempt = self._admit(spec)
        if attempt is not None:
            self._start_admitted(attempt)
        snapshot = self.snapshot(spec.attempt_uid)
        assert snapshot is not None  # admitted, known before, or recorded as a failure
        return snapshot

    def start_many(self, specs: Sequence[RunSpec], wait_s: float = 1.0) -> None:
        """Start several attempts at once, waiting at most ``wait_s`` for them to be running.

        Process creation mostly waits on the kernel (and drops the GIL), so a few starter threads
        bring a batch up several times faster than one by one. Attempts still starting after
        ``wait_s`` read as BUILDING and report through ``on_change`` once running.
        """
        admitted = [attempt for attempt in map(self._admit, specs) if attempt is not None]
        if len(admitted) == 1:
            self._start_admitted(admitted[0])
        elif admitted:
            # A few runners share the batch (not a future per attempt: a submit, a Future and a
            # wait on each cost more than many a short task's whole start).
            batch = _StartBatch(admitted, self._start_admitted)
            for _ in range(min(STARTER_THREADS, len(admitted))):
                self._starters.submit(batch.run)
            batch.done.wait(wait_s)

    def _admit(self, spec: RunSpec) -> _Attempt | None:
        """Record a new attempt as BUILDING; None if it is already known (or refused at once)."""
        uid = spec.attempt_uid
        if not SAFE_UID.match(uid):
            self.record_failure(uid, f"attempt uid {uid!r} is not a plain name")
            return None
        if self._closing:
            self.record_failure(uid, "the worker is shutting down")
            return None
        with self._lock:
            if uid in self._attempts:
                return None
            runnable = spec.image is None or self._containers is not None
            if runnable:
                attempt = _Attempt(uid, spec, attempt_log_path(self._attempts_path, uid))
                if spec.image is not None:
                    attempt.runtime = self._containers
                self._attempts[uid] = attempt
                self._unreleased[uid] = attempt
                return attempt
        self.record_failure(uid, f"image {spec.image} cannot run here: this worker has no container runtime.")
        return None

    def _start_admitted(self, attempt: _Attempt) -> None:
        assert attempt.spec is not None
        if (attempt.runtime is not None and not attempt.runtime.ready(attempt.spec)) or (
            self._preparer is not None and self._preparer.needed(attempt.spec)
        ):
            # The attempt's dir and log exist before its build thread does: a stop that comes at
            # once is still written to the attempt's log.
            try:
                work_dir = self._make_attempt_dir(attempt)
            except Exception as exc:  # noqa: BLE001 - any start failure becomes a FAILED attempt
                self._fail_start(attempt, exc)
                self._notify(attempt.uid)
                return
            name = f"iris-build-{attempt.uid}"
            threading.Thread(
                target=self._prepare_and_launch, args=(attempt, work_dir), name=name, daemon=True
            ).start()
            return
        with self._lock:
            if attempt.terminal:
                return  # killed before it got a thread
            attempt.launching = True
        try:
            self._make_attempt_dir(attempt)
            self._launch(attempt)
        except Exception as exc:  # noqa: BLE001 - any start failure becomes a FAILED attempt
            self._fail_start(attempt, exc)
        self._notify(attempt.uid)

    def _prepare_and_launch(self, attempt: _Attempt, work_dir: str) -> None:
        """BUILDING: let the preparer fill the work dir, then start (or end, if stopped meanwhile)."""
        assert attempt.spec is not None

        def cancelled() -> bool:
            return attempt.kill_reason is not None or self._closing

        try:
            assert attempt.log is not None
            if attempt.runtime is not None:
                attempt.runtime.prepare(attempt.spec, attempt.log.system)
            preparation = None
            if self._preparer is not None and self._preparer.needed(attempt.spec):
                preparation = self._preparer.prepare(
                    attempt.spec, Path(work_dir), attempt.log.system, cancelled
                )
            with self._lock:
                if attempt.terminal:
                    return  # killed while BUILDING: it has already ended
                attempt.launching = True
            if attempt.kill_reason is not None:
                self._end_unstarted(attempt)
            else:
                try:
                    self._launch(attempt, preparation)
                except Exception as exc:  # noqa: BLE001 - a start failure (no such command: 127)
                    self._fail_start(attempt, exc)
        except Exception as exc:  # noqa: BLE001 - any preparation failure ends the attempt
            if attempt.terminal:
                return
            if attempt.kill_reason is not None:
                self._end_unstarted(attempt)
            elif isinstance(exc, PreparationError):
                self._fail_start(attempt, exc, str(exc))
            else:
                logger.exception("preparing attempt %s failed", attempt.uid)
                self._fail_start(attempt, exc, f"could not prepare the attempt: {type(exc).__name__}: {exc}")
        self._notify(attempt.uid)

    def record_failure(self, attempt_uid: str, error: str) -> AttemptObservation:
        """Remember an attempt that could not even be prepared, as FAILED and released."""
        with self._lock:
            existing = self._attempts.get(attempt_uid)
            if existing is not None:
                return existing.snapshot()
            attempt = _Attempt(attempt_uid, None, None)
            now = time.time()
            attempt.state, attempt.error, attempt.finished_at, attempt.released = (
                TaskState.FAILED,
                error,
                now,
                True,
            )
            self._attempts[attempt_uid] = attempt
            self._retained.append(attempt_uid)
            self._changed_locked(attempt_uid)
        self._notify(attempt_uid)
        return attempt.snapshot()

    def kill(self, attempt_uid: str, reason: KillReason, message: str | None = None) -> None:
        """Kill the attempt's whole process tree (SIGTERM, SIGKILL after the grace). Idempotent."""
        with self._lock:
            attempt = self._attempts.get(attempt_uid)
        if attempt is not None:
            self._kill(attempt, reason, message or _kill_text(reason))

    def snapshot(self, attempt_uid: str) -> AttemptObservation | None:
        with self._lock:
            attempt = self._attempts.get(attempt_uid)
            return attempt.snapshot() if attempt is not None else None

    def process_status(self, attempt_uid: str) -> dict[str, Any]:
        """State, exit and the live process tree of one attempt; raises NotFound."""
        with self._lock:
            attempt = self._attempts.get(attempt_uid)
            if attempt is None:
                raise NotFound(f"attempt {attempt_uid} is not on this worker")
            snap = attempt.snapshot()
            pid = attempt.popen.pid if attempt.popen is not None and not attempt.released else None
            runtime = attempt.runtime
        extra = runtime.process_status(attempt_uid) if runtime is not None else {}
        return {
            **extra,
            "attempt_uid": attempt_uid,
            "state": snap.state.value,
            "exit_code": snap.exit_code,
            "error": snap.error,
            "started_at": snap.started_at,
            "finished_at": snap.finished_at,
            "processes": describe_processes(pid),
        }

    def exec(
        self, attempt_uid: str, argv: Sequence[str], timeout_s: float = 60.0, *, profiler: bool = False
    ) -> dict[str, Any]:
        """Run a command in a running attempt's working directory with its environment. A
        ``profiler`` (py-spy, memray: the worker's own tools) runs on this machine even for a
        container task, with ``$IRIS_TASK_PID`` the host pid of the container's task process."""
        with self._lock:
            attempt = self._attempts.get(attempt_uid)
            if attempt is None:
                raise NotFound(f"attempt {attempt_uid} is not on this worker")
            if attempt.terminal or attempt.work_dir is None or not attempt.env:
                raise FailedPrecondition(f"attempt {attempt_uid} is not running")
            cwd, env = attempt.work_dir, dict(attempt.env)
            lease = attempt.lease
            # What `iris job profile` needs: the task's root process and where the worker's own
            # tools (py-spy, memray) are installed.
            if attempt.popen is not None and attempt.returncode is None:
                env["IRIS_TASK_PID"] = str(attempt.popen.pid)
            env["IRIS_WORKER_BIN"] = os.path.dirname(sys.executable)
            runtime = attempt.runtime
        if runtime is not None and profiler:
            # The worker's own profiler, as the worker (root: the task is in a container): nothing
            # of the task's may steer it. Its environment (PATH=., LD_PRELOAD, TMPDIR) and its work
            # dir (which it writes) stay out: a fixed PATH, only the two variables the script reads.
            pid = container_task_pid(getattr(runtime, "container_pid", lambda _uid: 0)(attempt_uid))
            clean = {"PATH": _PROFILER_PATH, "IRIS_WORKER_BIN": env["IRIS_WORKER_BIN"]}
            if pid > 0:
                clean["IRIS_TASK_PID"] = str(pid)
            return run_beside(argv, cwd="/", env=clean, timeout_s=timeout_s)
        if runtime is not None:
            return run_beside(
                runtime.exec_argv(attempt_uid, argv), cwd=cwd, env=runtime.exec_env(env), timeout_s=timeout_s
            )
        if self._isolation is not None and lease is not None:
            argv = self._isolation.wrap(argv, lease.uid)  # as the task's own uid, never as root
        return run_beside(argv, cwd=cwd, env=env, timeout_s=timeout_s)

    def terminal_by_uid(self) -> dict[str, bool]:
        """Every attempt this runtime knows, mapped to whether it has ended (cheap: no snapshots)."""
        with self._lock:
            return {uid: a.state in TERMINAL_TASK_STATES for uid, a in self._attempts.items()}

    def terminal_of(self, asked: Iterable[str]) -> dict[str, bool]:
        """``terminal_by_uid`` cut down to what a reconcile looks at: each asked attempt this
        runtime knows, and every attempt that has not ended (not the thousands of ended ones
        retention keeps)."""
        with self._lock:
            known = {
                uid: attempt.state in TERMINAL_TASK_STATES
                for uid in asked
                if (attempt := self._attempts.get(uid)) is not None
            }
            for uid, attempt in self._unreleased.items():
                if attempt.state not in TERMINAL_TASK_STATES:
                    known[uid] = False
            return known

    def attempts_changed_since(self, mark: int) -> tuple[int, dict[str, bool]]:
        """(a new mark, each attempt whose log was made or that ended after ``mark`` -> whether it
        has ended): what the log shipper needs to know, and no sooner (an attempt waiting for a
        starter thread has no log yet to look at).

        Mark 0, or a mark so old that some of what followed is forgotten, gets every attempt this
        runtime knows (as ``terminal_by_uid``). Pass the returned mark next time.
        """
        with self._lock:
            if mark <= 0 or mark < self._changes_forgotten:
                return self._change_seq, self.terminal_by_uid()  # (the lock is reentrant)
            changed: dict[str, bool] = {}
            for uid, seq in reversed(self._changed_at.items()):
                if seq <= mark:
                    break
                attempt = self._attempts.get(uid)
                if attempt is not None:
                    changed[uid] = attempt.state in TERMINAL_TASK_STATES
            return self._change_seq, changed

    def take_finished_log(self, attempt_uid: str) -> bytes | None:
        """The whole content of a finished attempt's log file, if it stayed small and is still
        remembered (once: it is then forgotten); None otherwise (read the file)."""
        with self._lock:
            return self._small_logs.pop(attempt_uid, None)

    def state_of(self, attempt_uid: str) -> tuple[TaskState, bool] | None:
        """(state, whether its process ever started) of an attempt; cheaper than a snapshot."""
        with self._lock:
            attempt = self._attempts.get(attempt_uid)
            return (attempt.state, attempt.started_at is not None) if attempt is not None else None

    def live_task_ids(self) -> dict[str, str]:
        """Attempt uid -> task id, for every attempt that has not ended."""
        with self._lock:
            return {
                uid: task_id
                for uid, a in self._unreleased.items()
                if a.state not in TERMINAL_TASK_STATES
                and (task_id := a.spec.task_id if a.spec is not None else a.task_id)
            }

    def kill_all(self, reason: KillReason, message: str) -> list[str]:
        """Kill every attempt that has not ended, in any state (BUILDING included); their uids."""
        with self._lock:
            live = [a for a in self._unreleased.values() if not a.terminal]
        for attempt in live:
            self._kill(attempt, reason, message)
        return [a.uid for a in live]

    def live_processes(self) -> list[tuple[str, int, int]]:
        """(attempt uid, root pid, process group) of every attempt whose process tree may still
        run: from its start until it is released (what the pid journal records). The root pid is
        0 once the root has been reaped (its pid may then belong to another process)."""
        with self._lock:
            live = [
                (a.uid, a.popen.pid if a.returncode is None else 0, a.pgid)
                for a in self._unreleased.values()
                if a.popen is not None
            ]
            containers = [
                a.uid
                for a in self._unreleased.values()
                if a.runtime is not None
                and a.returncode is None
                and a.started_at is not None
                and time.time() - a.started_at >= CONTAINER_USAGE_AFTER_S
            ]
        if not containers:
            return live
        # A container's processes are not in its ``docker run`` CLI's tree: its init's tree is
        # sampled instead (looked up once, for attempts running long enough to be worth it).
        container_pid = getattr(self._containers, "container_pid", None)
        if container_pid is None:
            return live
        roots = {uid: pid for uid in containers if (pid := container_pid(uid)) > 0}
        return [
            (uid, roots[uid], roots[uid]) if uid in roots else entry for entry in live for uid in (entry[0],)
        ]

    def running_count(self) -> int:
        with self._lock:
            return sum(1 for a in self._unreleased.values() if not a.terminal)

    def pin(self, attempt_uids: frozenset[str]) -> None:
        """Attempts the controller still asks about: retention never forgets these."""
        self._pinned = attempt_uids

    def read_logs(self, attempt_uid: str, offset: int = 0, limit: int = 1000) -> LogsResponse:
        """A page of an attempt's log; raises NotFound for an attempt this worker never ran."""
        if not SAFE_UID.match(attempt_uid):
            raise NotFound(f"no attempt {attempt_uid!r} on worker {self.worker_id}")
        with self._lock:
            attempt = self._attempts.get(attempt_uid)
            finished = attempt is None or attempt.terminal
        path = attempt_log_path(self._attempts_path, attempt_uid)
        if attempt is None and not os.path.exists(path):
            raise NotFound(f"no attempt {attempt_uid!r} on worker {self.worker_id}")
        with self._lock:
            index = self._line_indexes.pop(attempt_uid, None) or LineIndex()
            self._line_indexes[attempt_uid] = index  # most recently read last
            while len(self._line_indexes) > _LINE_INDEXES_KEPT:
                del self._line_indexes[next(iter(self._line_indexes))]
        page = read_log_page(path, offset, limit, index)
        return LogsResponse(
            lines=[LogLine.model_construct(**line) for line in page.lines],
            next_offset=page.next_offset,
            complete=finished and page.at_end,
        )

    def wait_for(self, predicate: Callable[[], bool], timeout: float) -> bool:
        """Block until predicate() (checked at every state change) holds, or the timeout."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while not predicate():
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._changed.wait(min(remaining, 0.5))
        return True

    def shutdown(self) -> None:
        """Kill every live attempt and stop the runtime's threads."""
        with self._lock:
            self._closing = True
            live = [a for a in self._unreleased.values() if not a.terminal]
        for attempt in live:
            self._kill(attempt, KillReason.SHUTDOWN, _kill_text(KillReason.SHUTDOWN))

        def all_released() -> bool:
            return not self._unreleased

        if not self.wait_for(all_released, self._kill_grace_s + self._eof_grace_s + 1.0):
            for attempt in live:
                if attempt.popen is not None:
                    self._signal_tree(attempt, signal.SIGKILL)
            self.wait_for(all_released, 2.0)
        self._stop_monitor.set()
        self._monitor.join(timeout=5)
        self._starters.shutdown(wait=True)
        if self._spawner is not None:
            self._spawner.shutdown(wait=True)
        if self._observers is not None:
            self._observers.shutdown(wait=True)
        self._io.stop()
        self._pids.close()

    # ------------------------------------------------------------------ starting

    def _make_attempt_dir(self, attempt: _Attempt) -> str:
        """A fresh, empty work dir and a new log; returns the work dir."""
        uid = attempt.uid
        assert attempt.log_path is not None
        masks = attempt.spec.secret_env.values() if attempt.spec is not None else ()
        if self._isolation is None:
            work_dir = f"{self._tasks_path}/{uid}"
            payload = f"{self._attempts_path}/{uid}.callable.pkl"
            try:
                os.mkdir(work_dir, 0o700)
            except FileExistsError:  # a re-dispatch of the same attempt after a worker restart
                shutil.rmtree(work_dir, ignore_errors=True)
                os.mkdir(work_dir, 0o700)
        else:
            task_dir = f"{self._tasks_path}/{uid}"
            shutil.rmtree(task_dir, ignore_errors=True)
            os.mkdir(task_dir, 0o711)
            os.chmod(task_dir, 0o711)  # the worker's umask (077) would leave it closed to the task
            work_dir, payload = f"{task_dir}/work", f"{task_dir}/callable.pkl"
            os.mkdir(work_dir, 0o700)
        attempt.work_dir, attempt.payload = work_dir, payload
        try:
            attempt.log = AttemptLogWriter(attempt.log_path, self._log_max_bytes, exclusive=True, masks=masks)
        except FileExistsError:  # the log of its run before a worker restart: this run starts afresh
            remove_log(attempt.log_path)
            with self._lock:
                self._line_indexes.pop(uid, None)
            attempt.log = AttemptLogWriter(attempt.log_path, self._log_max_bytes, exclusive=True, masks=masks)
        with self._lock:
            self._small_logs.pop(uid, None)  # an earlier run's (a re-dispatch after retention forgot it)
            self._changed_locked(uid)
        return work_dir

    def _launch(self, attempt: _Attempt, preparation: Preparation | None = None) -> None:
        spec = attempt.spec
        assert spec is not None and attempt.work_dir is not None and attempt.payload is not None
        work_dir = attempt.work_dir
        busy = coordinator_port_in_use(spec)
        if busy is not None:
            raise PreparationError(busy)
        argv = self._argv(spec, attempt.payload, preparation.python if preparation else None)
        ports: dict[str, int] = {}
        if spec.ports:
            with self._lock:  # concurrent starts must not hand out the same port twice
                taken = {
                    port for a in self._unreleased.values() if not a.terminal for port in a.ports.values()
                }
                attempt.ports = ports = allocate_ports(spec.ports, taken)
        runtime = attempt.runtime
        env = build_attempt_env(
            self._base_env if runtime is None else {},
            spec,
            controller_url=self.controller_url,
            worker_id=self.worker_id,
            ports=ports,
            work_dir=work_dir,
        )
        if preparation is not None:
            env.update(preparation.env)
            if preparation.path_prepend and runtime is None:
                env["PATH"] = os.pathsep.join([*preparation.path_prepend, env.get("PATH", os.defpath)])
        device_env: Mapping[str, str] = {}
        if self._devices is not None:
            device_env = self._devices.acquire(spec)  # released with the attempt, on every path
            env.update(device_env)
        task_uid: int | None = None
        if self._isolation is not None:
            lease = self._isolation.pool.acquire()
            with self._lock:
                attempt.lease = lease
            self._isolation.hand_over(work_dir, lease.uid)
            if spec.entrypoint.kind != "command":
                os.chown(attempt.payload, lease.uid, lease.uid)
            env["HOME"] = work_dir
            task_uid = lease.uid
            if runtime is None:
                argv = self._isolation.wrap(argv, lease.uid)
        if runtime is not None:
            if not self._containers_marked:
                self._containers_marker.touch()
                self._containers_marked = True
            # The container gets the task env; its launcher (the CLI) runs with the worker's.
            argv, env = runtime.start(
                Launch(spec, argv, env, work_dir, task_uid=task_uid, device_env=device_env)
            )
        attempt.env = env
        popen_args: dict[str, Any] = {
            "cwd": work_dir,
            "env": env,
            "umask": TASK_UMASK,  # the usual one; the worker's own (077) keeps its state dir private
            # Popen would join the name to every PATH directory at every start.
            "executable": resolve_executable(argv[0], env.get("PATH", os.defpath)),
        }
        spawner = self._spawner
        if spawner is None:
            popen, out_r, err_r = _spawn_piped(subprocess.Popen, argv, popen_args)
        else:
            popen, out_r, err_r = _spawn_piped(
                lambda a, **kw: spawner.submit(subprocess.Popen, a, **kw).result(), argv, popen_args
            )
        try:
            pidfd = os.pidfd_open(popen.pid)
            info = read_proc(popen.pid)
            task_uid = attempt.lease.uid if attempt.lease is not None else -1
            record = PidRecord(
                attempt.uid,
                popen.pid,
                info.start_ticks if info else 0,
                self._boot_id,
                task_uid,
                container=runtime is not None,
            )
            self._pids.started(record)
            if runtime is None:
                attempt.log.system(f"started process {popen.pid}: {_describe(spec)}")
            else:
                attempt.log.system(
                    f"started {runtime.name} (process {popen.pid}) in image {spec.image}: {_describe(spec)}"
                )
        except BaseException:
            signal_group(popen.pid, signal.SIGKILL)
            popen.wait()
            os.close(out_r)
            os.close(err_r)
            self._pids.ended(attempt.uid)
            raise
        with self._lock:
            attempt.popen = popen
            attempt.pgid = popen.pid
            attempt.open_fds = {out_r: "stdout", err_r: "stderr"}
            attempt.state = TaskState.RUNNING
            attempt.started_at = time.time()
            # A container's memory is limited (and its OOM reported) by the engine's cgroup.
            attempt.memory_limit = spec.resources.memory_bytes if runtime is None else 0
            if spec.timeout_s:
                attempt.deadline = time.monotonic() + spec.timeout_s
            pending_kill = attempt.kill_reason
        self._io.watch(out_r, lambda fd: self._on_output(attempt, fd))
        self._io.watch(err_r, lambda fd: self._on_output(attempt, fd))
        self._io.watch(pidfd, lambda fd: self._on_exit(attempt, fd))
        if pending_kill is not None:  # killed while it was being started
            self._signal_tree(attempt, signal.SIGKILL)

    def _adopt_container(self, left: LeftAttempt) -> None:
        """Take over a container attempt a previous run of this worker started (the engine kept it
        running): RUNNING again, its output appended to its log from where that stopped, its end
        observed as any container attempt's. Whether the controller still wants it is for the
        first reconcile to say (one it does not ask about is a zombie, killed and removed)."""
        assert self._containers is not None
        uid = left.attempt_uid
        if not SAFE_UID.match(uid):
            raise ValueError(f"attempt uid {uid!r} is not a plain name")
        log_path = attempt_log_path(self._attempts_path, uid)
        skip_out, skip_err = count_output_lines(log_path)
        attempt = _Attempt(uid, None, log_path)
        attempt.runtime = self._containers
        attempt.work_dir = left.work_dir or None
        if self._isolation is not None and left.task_uid is not None:
            # Its uid stays its own: no new attempt may be given it while the container runs.
            attempt.lease = self._isolation.pool.acquire_uid(left.task_uid)
        attempt.log = AttemptLogWriter(log_path, self._log_max_bytes, masks=left.masks)
        attempt.log.skip_lines(skip_out, skip_err)  # the engine replays the whole output
        argv, env = self._containers.follow(left)
        popen, out_r, err_r = _spawn_piped(subprocess.Popen, argv, {"env": env})
        self._containers.await_exit(left)
        attempt.log.system(
            f"worker restarted: adopted the running container {left.name} (its output follows from "
            f"where this log stopped)"
        )
        pidfd = os.pidfd_open(popen.pid)
        info = read_proc(popen.pid)
        self._pids.started(
            PidRecord(
                uid,
                popen.pid,
                info.start_ticks if info else 0,
                self._boot_id,
                left.task_uid if left.task_uid is not None else -1,
                container=True,
            )
        )
        with self._lock:
            attempt.env = env
            attempt.popen = popen
            attempt.pgid = popen.pid
            attempt.open_fds = {out_r: "stdout", err_r: "stderr"}
            attempt.state = TaskState.RUNNING
            attempt.started_at = left.started_at or time.time()
            attempt.task_id = left.task_id
            attempt.adopted = True
            if left.timeout_s:
                elapsed = max(0.0, time.time() - attempt.started_at)
                attempt.deadline = time.monotonic() + max(0.0, left.timeout_s - elapsed)
                attempt.timeout_s = left.timeout_s
            self._attempts[uid] = attempt
            self._unreleased[uid] = attempt
            self._changed_locked(uid)
        self._io.watch(out_r, lambda fd: self._on_output(attempt, fd))
        self._io.watch(err_r, lambda fd: self._on_output(attempt, fd))
        self._io.watch(pidfd, lambda fd: self._on_exit(attempt, fd))

    @staticmethod
    def _argv(spec: RunSpec, payload: str, python: str | None = None) -> list[str]:
        if spec.entrypoint.kind == "command":
            return list(spec.entrypoint.argv)
        with open(payload, "wb") as f:
            f.write(base64.b64decode(spec.entrypoint.callable_b64 or ""))
        os.chmod(payload, 0o600)
        return [python or sys.executable, "-u", "-m", CALLABLE_RUNNER_MODULE, payload]

    def _end_unstarted(self, attempt: _Attempt) -> None:
        """Stopped while BUILDING: it ends (KILLED, or FAILED on a timeout) without a process."""
        with self._lock:
            if attempt.terminal:
                return
        outcome = final_outcome(0, attempt.kill_reason, attempt.kill_message)
        whole = None
        if attempt.log is not None:
            attempt.log.system(f"attempt {outcome.state.value} before it started: {outcome.error}")
            attempt.log.close()
            whole = attempt.log.take_whole()
        self._release_devices(attempt.uid)
        self._release_identity(attempt)
        with self._lock:
            attempt.state, attempt.exit_code, attempt.error = outcome.state, None, outcome.error
            self._ended_locked(attempt.uid, whole)
            attempt.finished_at = time.time()
            attempt.spec = None
            attempt.released = True
            self._unreleased.pop(attempt.uid, None)
            self._retained.append(attempt.uid)
            self._changed.notify_all()

    def _fail_start(self, attempt: _Attempt, exc: Exception, error: str | None = None) -> None:
        if error is None and isinstance(exc, PreparationError):
            error = str(exc)  # one sentence already
        if error is not None:
            code: int | None = None
        elif isinstance(exc, FileNotFoundError | NotADirectoryError):
            code = 127
        elif isinstance(exc, PermissionError):
            code = 126
        else:
            code = None
        error = error or f"could not start the process: {exc}"
        self._release_devices(attempt.uid)
        self._release_identity(attempt)
        whole = None
        if attempt.log is not None:
            attempt.log.system(error)
            attempt.log.close()
            whole = attempt.log.take_whole()
        with self._lock:
            attempt.state, attempt.exit_code, attempt.error = TaskState.FAILED, code, error
            self._ended_locked(attempt.uid, whole)
            attempt.finished_at = time.time()
            attempt.spec = None
            attempt.released = True
            self._unreleased.pop(attempt.uid, None)
            self._retained.append(attempt.uid)
            self._changed.notify_all()

    # ------------------------------------------------------------------ io loop side

    def _on_output(self, attempt: _Attempt, fd: int) -> None:
        try:
            data = os.read(fd, _READ_CHUNK)
        except OSError:
            data = b""
        stream = attempt.open_fds.get(fd)
        if stream is None:
            return
        assert attempt.log is not None
        if data:
            attempt.log.feed(stream, data)
            return
        attempt.log.end_stream(stream)
        self._io.forget(fd)
        os.close(fd)
        with self._lock:
            attempt.open_fds.pop(fd, None)
        self._maybe_finish(attempt)

    def _on_exit(self, attempt: _Attempt, pidfd: int) -> None:
        self._io.forget(pidfd)
        os.close(pidfd)
        assert attempt.popen is not None
        returncode = attempt.popen.wait()
        # The main process is gone: nothing of its tree may outlive it.
        signal_group(attempt.pgid, signal.SIGKILL)
        signal_identified(attempt.outsiders.copy(), signal.SIGKILL)
        if attempt.runtime is not None:
            # Inspecting and removing a container takes CLI calls: off the io loop's thread.
            if self._observers is None:
                with self._lock:
                    if self._observers is None:
                        self._observers = ThreadPoolExecutor(
                            max_workers=STARTER_THREADS, thread_name_prefix="iris-observe"
                        )
            self._observers.submit(self._observe_exit, attempt, returncode)
            return
        self._exited(attempt, returncode)

    def _observe_exit(self, attempt: _Attempt, returncode: int) -> None:
        assert attempt.runtime is not None
        try:
            facts = attempt.runtime.observe(attempt.uid, returncode)
        except Exception:
            logger.exception("observing the end of attempt %s failed", attempt.uid)
            facts = None
        if facts is not None and facts.exit_code is not None:
            returncode = facts.exit_code  # an adopted container's, not its follower's
        if facts is not None and (facts.oom or facts.lost):
            reason = KillReason.OOM if facts.oom else KillReason.FENCED
            with self._lock:
                if attempt.kill_reason is None or facts.lost:
                    attempt.kill_reason, attempt.kill_message = reason, facts.message
        elif facts is not None and facts.message and attempt.log is not None:
            attempt.log.system(facts.message)
        self._exited(attempt, returncode)

    def _exited(self, attempt: _Attempt, returncode: int) -> None:
        with self._lock:
            attempt.returncode = returncode
            attempt.eof_deadline = time.monotonic() + self._eof_grace_s
        self._maybe_finish(attempt)

    def _force_close_streams(self, attempt: _Attempt) -> None:
        for fd, stream in list(attempt.open_fds.items()):
            assert attempt.log is not None
            attempt.log.end_stream(stream)
            self._io.forget(fd)
            os.close(fd)
            with self._lock:
                attempt.open_fds.pop(fd, None)
        self._maybe_finish(attempt)

    def _maybe_finish(self, attempt: _Attempt) -> None:
        with self._lock:
            if attempt.returncode is None or attempt.open_fds or attempt.terminal:
                return
        if attempt.kill_reason is None and attempt.returncode != 0:
            fenced = f"{self._fenced_path}/{attempt.uid}"
            if os.path.exists(fenced):  # killed by the worker's watchdog while the worker was stopped
                try:
                    os.unlink(fenced)
                except FileNotFoundError:
                    pass
                attempt.kill_reason = KillReason.FENCED
                attempt.kill_message = _kill_text(KillReason.FENCED)
        outcome = final_outcome(attempt.returncode, attempt.kill_reason, attempt.kill_message)
        assert attempt.log is not None
        summary = f"attempt {outcome.state.value}, exit code {outcome.exit_code}"
        if outcome.error and not outcome.error.startswith("exited with code"):
            summary += f": {outcome.error}"
        attempt.log.system(summary)
        attempt.log.close()
        whole = attempt.log.take_whole()
        released = self._tree_gone(attempt)
        if not released and attempt.lease is not None:
            # Its main process has ended: what is left of its uid (a detached child) dies now,
            # before the uid can go to another attempt.
            self._kill_uid_leftovers(attempt)
            released = self._tree_gone(attempt)
        if released:
            self._pids.ended(attempt.uid)
        with self._lock:
            attempt.state, attempt.exit_code, attempt.error = outcome.state, outcome.exit_code, outcome.error
            self._ended_locked(attempt.uid, whole)
            attempt.finished_at = time.time()
            attempt.deadline = attempt.escalate_at = None
            attempt.spec = None  # a finished attempt is kept for a while: drop its (maybe large) payload
            if released:
                self._release_locked(attempt)
            self._changed.notify_all()
        self._notify(attempt.uid)

    def _tree_gone(self, attempt: _Attempt) -> bool:
        if group_alive(attempt.pgid):
            return False
        if not all(
            (info := read_proc(pid)) is None or info.start_ticks != ticks or info.dead
            for pid, ticks in attempt.outsiders.copy().items()
        ):
            return False
        # Isolated: its uid goes back to the pool only when no process of it is left at all.
        lease = attempt.lease
        return lease is None or not uid_processes({lease.uid})

    @staticmethod
    def _kill_uid_leftovers(attempt: _Attempt, sig: int = signal.SIGKILL) -> None:
        """Signal every process of the attempt's own uid (detached, re-grouped, env cleared: all)."""
        lease = attempt.lease
        if lease is not None:
            signal_identified(uid_processes({lease.uid}), sig)

    def _ended_locked(self, uid: str, whole_log: bytes | None) -> None:
        """Number an end, keeping the attempt's whole log if it stayed small (``take_finished_log``)."""
        if whole_log is not None:
            self._small_logs[uid] = whole_log
            if len(self._small_logs) > _SMALL_LOGS_KEPT:
                del self._small_logs[next(iter(self._small_logs))]
        self._changed_locked(uid)

    def _changed_locked(self, uid: str) -> None:
        """Number a new attempt log or an end (for ``attempts_changed_since``)."""
        self._change_seq += 1
        changed_at = self._changed_at
        changed_at.pop(uid, None)
        changed_at[uid] = self._change_seq
        if len(changed_at) > _CHANGES_KEPT:
            oldest = next(iter(changed_at))
            self._changes_forgotten = changed_at.pop(oldest)

    def _release_locked(self, attempt: _Attempt) -> None:
        """Mark released (the caller has removed the pid record, outside the lock)."""
        self._release_devices(attempt.uid)
        self._release_identity(attempt)
        attempt.released = True
        self._unreleased.pop(attempt.uid, None)
        self._retained.append(attempt.uid)

    @staticmethod
    def _release_identity(attempt: _Attempt) -> None:
        """Give the attempt's uid back once nothing of its process tree is left. Its work dir
        (kept a while for its files) becomes the worker's first: the uid's next holder, another
        user perhaps, must not read it."""
        lease, attempt.lease = attempt.lease, None
        if lease is not None:
            for path in (attempt.work_dir, attempt.payload):
                if path is not None:
                    try:
                        os.lchown(path, os.geteuid(), os.getegid())
                    except OSError:
                        pass  # not made (a start that failed early) or already removed
            UidPool.release(lease)

    def _release_devices(self, attempt_uid: str) -> None:
        if self._devices is not None:
            try:
                self._devices.release(attempt_uid)
            except Exception:
                logger.exception("releasing the devices of attempt %s failed", attempt_uid)

    # ------------------------------------------------------------------ killing

    def _kill(self, attempt: _Attempt, reason: KillReason, message: str) -> None:
        with self._lock:
            if attempt.terminal or attempt.kill_reason is not None or attempt.returncode is not None:
                return  # already ended (or ending on its own), or already being killed
            attempt.kill_reason, attempt.kill_message = reason, message
            end_now = attempt.popen is None and not attempt.launching
            if attempt.popen is None and attempt.launching:
                return  # its process is being created: ``_launch`` kills it as soon as it exists
        if end_now:
            # BUILDING (or not started yet): it ends now, whatever its preparation is doing
            # (a fetch or an environment build on a full disk may take long or hang).
            self._end_unstarted(attempt)
            self._notify(attempt.uid)
            return
        if attempt.log is not None:
            attempt.log.system(f"killing: {message}")
        if reason is KillReason.OOM:
            self._signal_tree(attempt, signal.SIGKILL)
            return
        if attempt.adopted and attempt.runtime is not None:
            # Its process only follows the container's output: the SIGTERM goes to the container
            # (and the follower is killed after the grace, which removes the container).
            attempt.runtime.kill(attempt.uid, self._kill_grace_s)
        else:
            self._signal_tree(attempt, signal.SIGTERM)
        with self._lock:
            attempt.escalate_at = time.monotonic() + self._kill_grace_s

    def _signal_tree(self, attempt: _Attempt, sig: int, table: ProcTable | None = None) -> None:
        """Signal the process group, and every descendant that left it (found now, via /proc)."""
        popen = attempt.popen
        if popen is None:
            return
        table = table if table is not None else scan_process_table()
        self._note_outsiders(attempt, table, process_tree(table, popen.pid, attempt.pgid))
        signal_group(attempt.pgid, sig)
        signal_identified(attempt.outsiders.copy(), sig)
        self._kill_uid_leftovers(attempt, sig)

    @staticmethod
    def _note_outsiders(attempt: _Attempt, table: ProcTable, tree: set[int]) -> None:
        for pid in tree:
            info = table.get(pid)
            if info is not None and info.pgid != attempt.pgid:
                attempt.outsiders[pid] = info.start_ticks

    # ------------------------------------------------------------------ monitor thread

    def _monitor_loop(self) -> None:
        while not self._stop_monitor.wait(self._monitor_interval_s):
            try:
                self._monitor_tick()
            except Exception:
                logger.exception("runtime monitor tick failed")

    def _monitor_tick(self) -> None:
        now = time.monotonic()
        with self._lock:
            live = [a for a in self._unreleased.values() if a.state is TaskState.RUNNING]
            unreleased = [a for a in self._unreleased.values() if a.terminal]
        running = [a for a in live if a.returncode is None and a.popen is not None]
        # One scan of /proc serves every memory check and escalation of this tick (the release
        # checks below do not read it).
        table: ProcTable | None = None
        if any(a.memory_limit > 0 for a in running):
            table = scan_process_table()
        rss: dict[str, int] = {}
        views = []
        for attempt in running:
            if attempt.memory_limit > 0 and table is not None:
                assert attempt.popen is not None
                tree = process_tree(table, attempt.popen.pid, attempt.pgid)
                self._note_outsiders(attempt, table, tree)
                rss[attempt.uid] = tree_rss(table, tree)
            spec = attempt.spec
            views.append(
                LimitView(
                    attempt.uid,
                    attempt.memory_limit,
                    attempt.deadline,
                    spec.timeout_s if spec else attempt.timeout_s,
                )
            )
        by_uid = {a.uid: a for a in running}
        for decision in decide_enforcements(views, rss, now):
            self._kill(by_uid[decision.attempt_uid], decision.reason, decision.message)
        for attempt in running:
            if attempt.escalate_at is not None and now >= attempt.escalate_at:
                attempt.escalate_at = None
                if attempt.log is not None:
                    attempt.log.system("still alive after the grace period: sending SIGKILL")
                self._signal_tree(attempt, signal.SIGKILL, table)
        for attempt in live:
            if attempt.returncode is not None and attempt.open_fds and attempt.eof_deadline is not None:
                if now >= attempt.eof_deadline:
                    attempt.eof_deadline = None
                    # On the io thread: it owns the pipe fds, so none can be closed and reused meanwhile.
                    self._io.call_soon(lambda a=attempt: self._handle_stuck_pipes(a))
        for attempt in unreleased:
            self._kill_uid_leftovers(attempt)
            if self._tree_gone(attempt):
                self._pids.ended(attempt.uid)
                with self._lock:
                    self._release_locked(attempt)
                    self._changed.notify_all()
                self._notify(attempt.uid)
        if now >= self._next_disk_check:
            self._next_disk_check = now + self._disk_check_interval_s
            self._check_disk()
        self._prune()

    def _check_disk(self) -> None:
        """Fail attempts over their disk request (work dir and log count), or, when the disk is
        full or out of inodes, the one using the most of it; first free finished attempts' files."""
        with self._lock:
            live = [a for a in self._unreleased.values() if not a.terminal and a.kill_reason is None]
        views = []
        for attempt in live:
            request = attempt.spec.resources.disk_bytes if attempt.spec is not None else 0
            used, entries = (
                dir_usage_and_entries(attempt.work_dir) if attempt.work_dir is not None else (0, 0)
            )
            used += self._log_bytes(attempt.uid)
            views.append(DiskView(attempt.uid, used, request, entries))
        free, inodes = self._free_space()
        if free < 4 * self._min_free_disk_bytes or (inodes is not None and inodes < 4 * MIN_FREE_INODES):
            self._free_finished_files()
            free, inodes = self._free_space()
        by_uid = {a.uid: a for a in live}
        for decision in decide_disk(views, free, self._min_free_disk_bytes, inodes):
            self._kill(by_uid[decision.attempt_uid], decision.reason, decision.message)

    def _free_space(self) -> tuple[int, int | None]:
        try:
            free = shutil.disk_usage(self.tasks_dir).free
        except OSError:
            free = self._min_free_disk_bytes
        return free, free_inodes(self.tasks_dir)

    def _log_bytes(self, uid: str) -> int:
        """Bytes of the attempt's own log files (its output counts against it)."""
        if not SAFE_UID.match(uid):
            return 0
        total = 0
        for path in rotated_paths(attempt_log_path(self._attempts_path, uid)):
            try:
                total += os.stat(path).st_blocks * 512
            except OSError:
                continue
        return total

    def _free_finished_files(self) -> None:
        """Short of space: delete the work dirs of finished attempts (their logs stay), failed
        ones first, so a worker that filled up recovers by itself (and leaves DEGRADED)."""
        with self._lock:
            finished = [
                self._attempts[uid]
                for uid in self._retained
                if uid in self._attempts and self._attempts[uid].terminal and self._attempts[uid].released
            ]
        finished.sort(key=lambda a: a.state is TaskState.SUCCEEDED)  # failed and killed first
        for attempt in finished:
            if attempt.work_dir is None or not os.path.isdir(attempt.work_dir):
                continue
            shutil.rmtree(attempt.work_dir, ignore_errors=True)
            free, inodes = self._free_space()
            if free >= 4 * self._min_free_disk_bytes and (inodes is None or inodes >= 4 * MIN_FREE_INODES):
                return

    def _handle_stuck_pipes(self, attempt: _Attempt) -> None:
        """The main process exited but something still holds its output pipes open (io thread).

        First kill whoever holds them (found by pipe inode); if that does not bring EOF within
        another grace period, close our ends and finish the attempt anyway.
        """
        if not attempt.open_fds:
            return
        if not attempt.holders_killed:
            attempt.holders_killed = True
            inodes = set()
            for fd in list(attempt.open_fds):
                try:
                    inodes.add(os.fstat(fd).st_ino)
                except OSError:
                    continue
            for pid in pipe_holders(inodes):
                info = read_proc(pid)
                if info is not None:
                    attempt.outsiders[pid] = info.start_ticks
            signal_identified(attempt.outsiders.copy(), signal.SIGKILL)
            attempt.eof_deadline = time.monotonic() + self._eof_grace_s
            return
        self._force_close_streams(attempt)

    def _prune(self) -> None:
        doomed: list[str] = []
        with self._lock:
            for _ in range(max(0, len(self._retained) - self._keep_finished)):
                uid = self._retained.popleft()
                if uid in self._pinned:
                    self._retained.append(uid)
                    continue
                attempt = self._attempts.get(uid)
                if attempt is not None and not (attempt.terminal and attempt.released):
                    continue  # a newer run of the same uid: it re-enters the queue when it ends
                self._attempts.pop(uid, None)
                self._small_logs.pop(uid, None)
                doomed.append(uid)
        for uid in doomed:
            if SAFE_UID.match(uid):
                remove_log(attempt_log_path(self._attempts_path, uid))
                if self._isolation is None:
                    try:
                        os.unlink(f"{self._attempts_path}/{uid}.callable.pkl")
                    except FileNotFoundError:
                        pass
                shutil.rmtree(f"{self._tasks_path}/{uid}", ignore_errors=True)

    def _adopt_previous_logs(self) -> None:
        """Attempts of a previous run stay readable (as finished logs) until retention drops them."""
        previous: dict[str, float] = {}
        sources = [self.attempts_dir] + ([self.tasks_dir] if self._isolation is None else [])
        for directory in sources:
            for entry in os.scandir(directory):
                try:
                    is_dir = entry.is_dir(follow_symlinks=False)
                    uid = entry.name if is_dir else logged_attempt(entry.name)
                    if uid is None:
                        continue
                    previous[uid] = max(previous.get(uid, 0.0), entry.stat(follow_symlinks=False).st_mtime)
                    if directory == self.attempts_dir and is_dir and SAFE_UID.match(uid):
                        self._move_from_old_layout(uid)
                except OSError:
                    continue
        self._retained.extend(uid for uid, _ in sorted(previous.items(), key=lambda item: item[1]))

    def _move_from_old_layout(self, uid: str) -> None:
        """An attempt of an older version, ``attempts/<uid>/`` with its ``log.jsonl`` (rotated files
        beside it), ``work/`` and ``callable.pkl``, moved to where this version keeps them."""
        old = self.attempts_dir / uid
        new_log = attempt_log_path(self.attempts_dir, uid)
        for before, after in zip(rotated_paths(old / "log.jsonl"), rotated_paths(new_log), strict=True):
            if before.exists():
                os.replace(before, after)
        moves = [(old / "callable.pkl", self.attempts_dir / f"{uid}.callable.pkl")]
        if self._isolation is None:
            moves.append((old / "work", self.tasks_dir / uid))
        for before, after in moves:
            if before.exists() and not after.exists():
                os.rename(before, after)
        shutil.rmtree(old, ignore_errors=True)

    def _notify(self, attempt_uid: str) -> None:
        if self._on_change is not None:
            try:
                self._on_change(attempt_uid)
            except Exception:
                logger.exception("state-change callback failed")


def _describe(spec: RunSpec) -> str:
    if spec.entrypoint.kind == "command":
        text = shlex.join(spec.entrypoint.argv)
        return text if len(text) <= 500 else text[:497] + "..."
    return "python callable"


def _kill_text(reason: KillReason) -> str:
    return {
        KillReason.STOP: "stopped by the controller",
        KillReason.ZOMBIE: "killed: the controller no longer wants this attempt",
        KillReason.SHUTDOWN: "killed: the worker is shutting down",
        KillReason.TIMEOUT: "timed out",
        KillReason.OOM: "out of memory",
        KillReason.FENCED: "killed: the controller has not reconciled this worker for too long",
        KillReason.DISK: "used too much disk",
    }[reason]
