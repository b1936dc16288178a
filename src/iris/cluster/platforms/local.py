"""Slices made of worker daemon processes on this machine.

Each slice is a directory ``<state_dir>/slices/<slice_id>/`` holding ``slice.json`` (pids and
process start times of its workers), one ``worker-N.log`` and one ``worker-N.ready`` file per
worker and the workers' own state directories. Everything needed to find the processes again is on
disk, so a new ``LocalPlatform`` on the same state dir (a restarted controller) adopts running
slices instead of starting new ones. Workers run in their own sessions, so they survive the
controller.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

import psutil

from iris.cluster.config import ScaleGroupConfig
from iris.cluster.platforms.base import PlatformError, SliceHandle, SliceInfo, SliceState, worker_id_for
from iris.rpc.units import format_cpu

logger = logging.getLogger(__name__)

# Appended to the worker command line of groups with ``local.fail_boot``: the daemon rejects it and
# exits at once, which is a real boot failure with a real log line.
FAIL_BOOT_FLAG = "--fail-boot-on-purpose"
_SLICE_FILE = "slice.json"
_PID_START_TOLERANCE_S = 1.0


@dataclass(frozen=True)
class _WorkerRecord:
    worker_id: str
    pid: int
    started_at: float  # process create time, guards against pid reuse
    ready_file: str
    log_file: str
    state_dir: str


@dataclass(frozen=True)
class _SliceRecord:
    slice_id: str
    scale_group: str
    created_at: float
    workers: tuple[_WorkerRecord, ...]

    def to_json(self) -> str:
        return json.dumps(
            {
                "slice_id": self.slice_id,
                "scale_group": self.scale_group,
                "created_at": self.created_at,
                "workers": [w.__dict__ for w in self.workers],
            },
            indent=1,
        )

    @classmethod
    def from_json(cls, text: str) -> _SliceRecord:
        data = json.loads(text)
        return cls(
            slice_id=data["slice_id"],
            scale_group=data["scale_group"],
            created_at=float(data["created_at"]),
            workers=tuple(_WorkerRecord(**w) for w in data["workers"]),
        )


class LocalPlatform:
    """Starts ``num_vms`` ``python -m iris.cluster.worker`` processes per slice.

    Each worker offers one machine of the group (``--cpu``, ``--memory``, ``--disk``, ``--device``)
    and registers with the group's attributes plus ``scale-group`` and ``slice``.
    """

    kind = "local"

    def __init__(
        self,
        state_dir: str | Path,
        *,
        python: str = sys.executable,
        env: Mapping[str, str] | None = None,
        terminate_grace_s: float = 5.0,
        keep_terminated_logs_s: float = 86_400.0,
        reregister_after_s: float | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._root = Path(state_dir).expanduser() / "slices"
        self._root.mkdir(parents=True, exist_ok=True)
        self._python = python
        self._env = dict(os.environ if env is None else env)
        self._env.setdefault("PYTHONUNBUFFERED", "1")
        self._grace = terminate_grace_s
        self._keep_logs = keep_terminated_logs_s
        self._reregister_after_s = reregister_after_s
        self._clock = clock
        self._lock = threading.Lock()
        self._procs: dict[int, subprocess.Popen[bytes]] = {}

    # ------------------------------------------------------------ Platform

    def create_slice(self, group: ScaleGroupConfig, slice_id: str, controller_url: str) -> SliceHandle:
        slice_dir = self._root / slice_id
        with self._lock:
            if (slice_dir / _SLICE_FILE).exists():
                raise PlatformError(f"slice {slice_id} already exists")
            slice_dir.mkdir(parents=True, exist_ok=True)
            created_at = self._clock()
            workers: list[_WorkerRecord] = []
            try:
                for index in range(group.num_vms):
                    workers.append(self._spawn(group, slice_id, index, slice_dir, controller_url))
            except OSError as exc:
                for worker in workers:
                    self._kill_now(worker)
                shutil.rmtree(slice_dir, ignore_errors=True)
                raise PlatformError(f"cannot start worker daemons for slice {slice_id}: {exc}") from exc
            record = _SliceRecord(slice_id, group.name, created_at, tuple(workers))
            tmp = slice_dir / (_SLICE_FILE + ".tmp")
            tmp.write_text(record.to_json())
            tmp.replace(slice_dir / _SLICE_FILE)
        logger.info("local slice %s: started %d worker(s) for group %s", slice_id, len(workers), group.name)
        return SliceHandle(slice_id, group.name, created_at, tuple(w.worker_id for w in workers))

    def list_slices(self) -> list[SliceInfo]:
        infos = []
        for slice_file in sorted(self._root.glob(f"*/{_SLICE_FILE}")):
            record = self._read(slice_file)
            if record is not None:
                infos.append(self._describe(record))
        return infos

    def describe(self, slice_id: str) -> SliceInfo:
        record = self._read(self._root / slice_id / _SLICE_FILE)
        if record is None:
            raise KeyError(slice_id)
        return self._describe(record)

    def terminate(self, slice_id: str) -> None:
        slice_dir = self._root / slice_id
        with self._lock:
            record = self._read(slice_dir / _SLICE_FILE)
            if record is None:
                return
            self._stop_workers(record.workers)
            (slice_dir / _SLICE_FILE).unlink(missing_ok=True)
            for worker in record.workers:
                shutil.rmtree(worker.state_dir, ignore_errors=True)
                Path(worker.ready_file).unlink(missing_ok=True)
            self._prune_old_logs()
        logger.info("local slice %s: terminated", slice_id)

    # ------------------------------------------------------------ helpers

    def _spawn(
        self, group: ScaleGroupConfig, slice_id: str, index: int, slice_dir: Path, controller_url: str
    ) -> _WorkerRecord:
        worker_id = worker_id_for(slice_id, index)
        state_dir = slice_dir / f"worker-{index}"
        state_dir.mkdir(exist_ok=True)
        ready_file = slice_dir / f"worker-{index}.ready"
        ready_file.unlink(missing_ok=True)
        log_file = slice_dir / f"worker-{index}.log"
        argv = [
            self._python,
            "-m",
            "iris.cluster.worker",
            "--controller",
            controller_url,
            "--worker-id",
            worker_id,
            "--slice-id",
            slice_id,
            "--scale-group",
            group.name,
            "--cpu",
            format_cpu(group.resources.cpu_millicores),
            "--memory",
            str(group.resources.memory_bytes),
        ]
        resources = group.resources
        if resources.disk_bytes:
            argv += ["--disk", str(resources.disk_bytes)]
        device = resources.device
        if device is not None and device.count > 0 and device.type.lower() != "cpu":
            argv += ["--device", f"{device.type}:{device.variant}:{device.count}"]
        if self._reregister_after_s is not None:
            argv += ["--reregister-after", str(self._reregister_after_s)]
        for key, value in sorted(group.worker_attributes(slice_id).items()):
            argv += ["--attr", f"{key}={value}"]
        argv += ["--state-dir", str(state_dir), "--ready-file", str(ready_file)]
        if group.local.fail_boot:
            argv.append(FAIL_BOOT_FLAG)
        with open(log_file, "ab") as log:
            proc = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=state_dir,
                env=self._env,
                start_new_session=True,
            )
        self._procs[proc.pid] = proc
        try:
            started_at = psutil.Process(proc.pid).create_time()
        except psutil.NoSuchProcess:
            started_at = 0.0  # already gone: describe() reports the exit from the Popen
        return _WorkerRecord(worker_id, proc.pid, started_at, str(ready_file), str(log_file), str(state_dir))

    def _read(self, slice_file: Path) -> _SliceRecord | None:
        try:
            return _SliceRecord.from_json(slice_file.read_text())
        except FileNotFoundError:
            return None
        except (ValueError, KeyError, TypeError) as exc:
            logger.warning("ignoring unreadable slice record %s: %s", slice_file, exc)
            return None

    def _describe(self, record: _SliceRecord) -> SliceInfo:
        addresses: list[str] = []
        state = SliceState.READY
        error = None
        for worker in record.workers:
            alive, exit_code = self._alive(worker)
            if not alive:
                code = f" with code {exit_code}" if exit_code is not None else ""
                error = f"worker {worker.worker_id} exited{code}{_log_tail(worker.log_file)}"
                state = SliceState.FAILED
                break
            address = _read_ready_file(worker.ready_file)
            if address is None:
                state = SliceState.BOOTING
            else:
                addresses.append(address)
        return SliceInfo(
            slice_id=record.slice_id,
            scale_group=record.scale_group,
            state=state,
            created_at=record.created_at,
            worker_ids=tuple(w.worker_id for w in record.workers),
            addresses=tuple(addresses) if state is SliceState.READY else (),
            error=error,
        )

    def _alive(self, worker: _WorkerRecord) -> tuple[bool, int | None]:
        proc = self._procs.get(worker.pid)
        if proc is not None:
            code = proc.poll()
            return code is None, code
        process = _same_process(worker)
        if process is None:
            return False, None
        try:
            if process.status() != psutil.STATUS_ZOMBIE:
                return True, None
        except psutil.NoSuchProcess:
            return False, None
        return False, _reap(worker.pid)

    def _stop_workers(self, workers: tuple[_WorkerRecord, ...]) -> None:
        """SIGTERM each worker's process group, wait, then SIGKILL what is left (incl. task processes)."""
        processes: list[psutil.Process] = []
        for worker in workers:
            process = _same_process(worker)
            if process is None:
                continue
            try:
                descendants = process.children(recursive=True)
            except psutil.NoSuchProcess:
                descendants = []
            _signal_group(worker.pid, signal.SIGTERM)
            processes.append(process)
            processes += descendants
        _, alive = psutil.wait_procs(processes, timeout=self._grace)
        for process in alive:
            try:
                process.kill()
            except psutil.NoSuchProcess:
                pass
        psutil.wait_procs(alive, timeout=self._grace)
        for worker in workers:
            proc = self._procs.pop(worker.pid, None)
            if proc is None:
                _reap(worker.pid)
                continue
            try:
                proc.wait(timeout=self._grace)
            except subprocess.TimeoutExpired:
                logger.warning("worker %s (pid %d) survived SIGKILL", worker.worker_id, worker.pid)

    def _kill_now(self, worker: _WorkerRecord) -> None:
        proc = self._procs.pop(worker.pid, None)
        if proc is not None:
            proc.kill()
            proc.wait()

    def _prune_old_logs(self) -> None:
        cutoff = time.time() - self._keep_logs
        for slice_dir in self._root.iterdir():
            if slice_dir.is_dir() and not (slice_dir / _SLICE_FILE).exists():
                try:
                    if slice_dir.stat().st_mtime < cutoff:
                        shutil.rmtree(slice_dir, ignore_errors=True)
                except FileNotFoundError:
                    pass


def _same_process(worker: _WorkerRecord) -> psutil.Process | None:
    """The recorded process if it still exists (and its pid was not reused by another program)."""
    try:
        process = psutil.Process(worker.pid)
        if abs(process.create_time() - worker.started_at) > _PID_START_TOLERANCE_S:
            return None
        return process
    except psutil.NoSuchProcess:
        return None


def _signal_group(pid: int, sig: signal.Signals) -> None:
    """Signal the worker's process group (it is a session leader, so pgid == pid)."""
    try:
        if os.getpgid(pid) == pid:
            os.killpg(pid, sig)
        else:
            os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _reap(pid: int) -> int | None:
    """Collect the exit status of a dead child of this process (a zombie left by an earlier instance)."""
    try:
        reaped, status = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return None
    return os.waitstatus_to_exitcode(status) if reaped == pid else None


def _read_ready_file(path: str) -> str | None:
    """The worker's address from its ready file: JSON with an ``address`` key, or the address as text."""
    try:
        text = Path(path).read_text().strip()
    except FileNotFoundError:
        return None
    if text.startswith("{"):
        try:
            data = json.loads(text)
        except ValueError:
            return None  # still being written
        return str(data.get("address") or "")
    return text.splitlines()[0] if text else ""


def _log_tail(log_file: str) -> str:
    try:
        with open(log_file, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            fh.seek(max(0, fh.tell() - 4096))
            lines = [line.strip() for line in fh.read().decode(errors="replace").splitlines() if line.strip()]
    except OSError:
        return ""
    return f": {lines[-1][:300]} (log: {log_file})" if lines else f" (log: {log_file})"
