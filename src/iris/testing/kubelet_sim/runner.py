"""One pod's container as a real local process group, with its life reported as pod status."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

from iris.testing.kubelet_sim import pod_status
from iris.testing.kubelet_sim.k8s_types import utc_timestamp
from iris.testing.kubelet_sim.pod_logs import ContainerLog

log = logging.getLogger(__name__)

StatusUpdate = Callable[[dict[str, Any], dict[str, Any]], dict[str, Any]]  # (status, pod) -> new status


@dataclass(frozen=True)
class ContainerPlan:
    """What to run; ``failure`` is a (waiting reason, message) when the container can never start."""

    argv: list[str]
    env: dict[str, str]
    cwd: Path
    image: str
    memory_limit_bytes: int | None = None
    active_deadline_seconds: int | None = None
    failure: tuple[str, str] | None = None
    image_pull_backoff_after: float = 1.0  # ErrImagePull turns into ImagePullBackOff after this long
    name: str = ""
    init: list[ContainerPlan] = field(default_factory=list)  # init containers, run to completion first


class ContainerRunner:
    """Runs the plan on its own thread; ``report`` writes pod status, ``on_exit`` fires once at the end."""

    def __init__(
        self,
        pod_key: tuple[str, str],
        plan: ContainerPlan,
        container_log: ContainerLog,
        report: Callable[[StatusUpdate], None],
        on_exit: Callable[[ContainerRunner], None],
    ) -> None:
        self.pod_key = pod_key
        self.plan = plan
        self._log = container_log
        self._report = report
        self._on_exit = on_exit
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._process: subprocess.Popen[bytes] | None = None
        self._kill_reason = ""
        self._kill_at: float | None = None
        self._started_monotonic: float | None = None
        self._thread = threading.Thread(target=self._run, name=f"container-{pod_key[1]}", daemon=True)

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process else None

    def start(self) -> None:
        self._thread.start()

    def join(self, timeout: float | None = None) -> None:
        self._thread.join(timeout)

    # ----- control ------------------------------------------------------------------------------

    def terminate(self, grace_seconds: float) -> None:
        """Graceful stop: SIGTERM now, SIGKILL once the grace period is over (see ``check``)."""
        with self._lock:
            self._stop.set()
            kill_at = time.monotonic() + grace_seconds
            if self._kill_at is not None and self._kill_at <= kill_at:
                return  # already stopping at least this fast
            self._kill_at = kill_at
        self._signal(signal.SIGTERM if grace_seconds > 0 else signal.SIGKILL)

    def kill(self, reason: str = "") -> None:
        with self._lock:
            self._stop.set()
            if reason and not self._kill_reason:
                self._kill_reason = reason
        self._signal(signal.SIGKILL)

    def _signal(self, sig: int) -> None:
        process = self._process
        if process is None or process.returncode is not None:
            return
        try:
            os.killpg(process.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass

    def check(self, now: float) -> None:
        """Watchdog tick: grace expiry, activeDeadlineSeconds, memory limit."""
        process = self._process
        if process is None or process.returncode is not None:
            return
        if self._kill_at is not None and now >= self._kill_at:
            self._signal(signal.SIGKILL)
        deadline = self.plan.active_deadline_seconds
        if (
            deadline is not None
            and self._started_monotonic is not None
            and now - self._started_monotonic > deadline
        ):
            self.kill("DeadlineExceeded")
        if self.plan.memory_limit_bytes is not None and _tree_rss(process.pid) > self.plan.memory_limit_bytes:
            self.kill("OOMKilled")

    # ----- the container's life -----------------------------------------------------------------

    def _run(self) -> None:
        try:
            self._live()
        except Exception:
            log.exception("container runner for %s/%s failed", *self.pod_key)
        finally:
            self._log.finish()
            self._on_exit(self)

    def _live(self) -> None:
        plan = self.plan
        if plan.failure is not None:
            reason, message = plan.failure
            self._report(lambda status, pod: pod_status.waiting(status, pod, reason, message))
            if reason == "ErrImagePull" and not self._stop.wait(plan.image_pull_backoff_after):
                backoff = f'Back-off pulling image "{plan.image}"'
                self._report(lambda status, pod: pod_status.waiting(status, pod, "ImagePullBackOff", backoff))
            self._stop.wait()
            self._report_never_started()
            return
        if self._stop.is_set() or not self._run_init_containers():
            if self._stop.is_set():
                self._report_never_started()
            return
        started_at = utc_timestamp()
        try:
            process = subprocess.Popen(
                plan.argv,
                cwd=plan.cwd,
                env=plan.env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        except OSError as exc:
            message = f"failed to create containerd task: exec: {plan.argv[0]!r}: {exc.strerror or exc}"
            self._log.write_line(message)
            self._report(
                lambda status, pod: pod_status.terminated(
                    status,
                    pod,
                    exit_code=128,
                    reason="StartError",
                    message=message,
                    started_at=started_at,
                    finished_at=utc_timestamp(),
                )
            )
            return
        with self._lock:
            self._process = process
            self._started_monotonic = time.monotonic()
            stop_requested = self._stop.is_set()
        if stop_requested:
            self._signal(signal.SIGKILL)
        container_id = f"iris-fake://{process.pid}"
        self._report(lambda status, pod: pod_status.running(status, pod, started_at, container_id))
        reader = threading.Thread(
            target=self._pump_output, args=(process,), name=f"logs-{self.pod_key[1]}", daemon=True
        )
        reader.start()
        returncode = process.wait()
        try:  # the container is gone: nothing of its process group may outlive it
            os.killpg(process.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        reader.join(timeout=2)
        exit_code = returncode if returncode >= 0 else 128 - returncode
        kill_reason = self._kill_reason
        if kill_reason == "OOMKilled":
            reason = "OOMKilled"
        else:
            reason = "Completed" if exit_code == 0 else "Error"
        pod_reason, pod_message = "", ""
        if kill_reason == "DeadlineExceeded":
            pod_reason, pod_message = (
                "DeadlineExceeded",
                "Pod was active on the node longer than the specified deadline",
            )
        finished_at = utc_timestamp()
        self._report(
            lambda status, pod: pod_status.terminated(
                status,
                pod,
                exit_code=exit_code,
                reason=reason,
                started_at=started_at,
                finished_at=finished_at,
                container_id=container_id,
                pod_reason=pod_reason,
                pod_message=pod_message,
            )
        )

    def _report_never_started(self) -> None:
        """The pod was stopped before its container ran: as the kubelet does, end it Failed with the
        container terminated (137, ContainerStatusUnknown), so the pod can leave Terminating once
        finalizers (Kueue's) see it finished."""
        now = utc_timestamp()
        self._report(
            lambda status, pod: pod_status.terminated(
                status,
                pod,
                exit_code=137,
                reason="ContainerStatusUnknown",
                message="The container could not be located when the pod was terminated",
                started_at=now,
                finished_at=now,
            )
        )

    def _run_init_containers(self) -> bool:
        """Each init container in order, to completion; a failure fails the pod (Init:Error)."""
        for init in self.plan.init:
            self._report(lambda status, pod: pod_status.waiting(status, pod, "PodInitializing", ""))
            try:
                process = subprocess.Popen(
                    init.argv, cwd=init.cwd, env=init.env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT, start_new_session=True,
                )  # fmt: skip
            except OSError as exc:
                code, output = 128, str(exc)
            else:
                # Tracked like the main container: deleting the pod stops a waiting init container.
                with self._lock:
                    self._process = process
                    stop_requested = self._stop.is_set()
                if stop_requested:
                    self._signal(signal.SIGKILL)
                try:
                    out, _ = process.communicate(timeout=300)
                    code, output = process.returncode, out.decode("utf-8", "replace")
                except subprocess.TimeoutExpired as exc:
                    self._signal(signal.SIGKILL)
                    process.communicate()
                    code, output = 128, str(exc)
                with self._lock:
                    self._process = None
            if self._stop.is_set():
                return False
            if code != 0:
                message = f"init container {init.name} exited with code {code}: {output.strip()[-500:]}"
                self._log.write_line(message)
                now = utc_timestamp()
                self._report(
                    lambda status, pod, code=code, message=message, now=now, init=init: pod_status.init_failed(
                        pod_status.terminated(
                            status, pod, exit_code=code, reason="Init:Error", message=message, started_at=now,
                            finished_at=now,
                        ),
                        init.name, exit_code=code, message=message, at=now,
                    )
                )  # fmt: skip
                return False
        return True

    def _pump_output(self, process: subprocess.Popen[bytes]) -> None:
        assert process.stdout is not None
        for raw in process.stdout:
            self._log.write_line(raw.decode("utf-8", errors="replace"))
        process.stdout.close()


def _tree_rss(pid: int) -> int:
    try:
        root = psutil.Process(pid)
        processes = [root, *root.children(recursive=True)]
    except psutil.Error:
        return 0
    total = 0
    for process in processes:
        try:
            total += process.memory_info().rss
        except psutil.Error:
            pass
    return total
