"""Fencing: a worker cut off from its controller kills its own attempts; a dead worker leaves none."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

from tests.runtime.helpers import recorded_pgids
from tests.worker.harness import ControllerStub, WorkerProcess, start_worker, wait_until

from iris.cluster.controller.worker_health import (
    KILL_ALLOWANCE_S,
    HealthEvent,
    WorkerHealthTracker,
    fence_after,
)
from iris.rpc.enums import TaskState, WorkerStatus
from iris.rpc.models import AttemptObservation, DesiredAttempt, Entrypoint, ResourceSpec, RunSpec
from iris.testing.proc_state import running


def run(uid: str, *argv: str) -> DesiredAttempt:
    spec = RunSpec(
        attempt_uid=uid,
        attempt_number=0,
        job_id="/alice/train",
        task_id=f"/alice/train/{uid}",
        task_index=0,
        entrypoint=Entrypoint.from_command(*argv),
        resources=ResourceSpec(cpu=1, memory="1GB"),
    )
    return DesiredAttempt(attempt_uid=uid, intent="run", spec=spec)


def leader(worker: WorkerProcess, uid: str) -> int:
    return recorded_pgids(worker.state_dir / "pids")[uid]


def group_alive(pgid: int) -> bool:
    """Any live (non-zombie) process in the group."""
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[2]) == pgid and fields[0] != "Z":
                return True
    return False


def log_text(worker: WorkerProcess, uid: str) -> str:
    return (worker.state_dir / "attempts" / f"{uid}.jsonl").read_text()


def test_unreconciled_worker_kills_its_attempts_after_the_advised_grace(tmp_path: Path) -> None:
    stub = ControllerStub(fence_after_s=2.0).start()
    proc = start_worker(tmp_path, stub.url, "--reregister-after", "60")
    try:
        proc.reconcile([run("p1", "sleep", "100")])
        pid = leader(proc, "p1")
        started = time.monotonic()
        # The controller stops reconciling (a partition): the worker fences itself.
        wait_until(lambda: not running(pid), timeout=15, what="the fenced attempt to be killed")
        assert time.monotonic() - started >= 1.5
        assert "fenced: the controller has not reconciled this worker" in log_text(proc, "p1")
    finally:
        proc.stop()
        stub.stop()


def test_steady_reconciles_keep_attempts_alive(tmp_path: Path) -> None:
    stub = ControllerStub(fence_after_s=2.0).start()
    proc = start_worker(tmp_path, stub.url, "--reregister-after", "60")
    try:
        proc.reconcile([run("k1", "sleep", "100")])
        pid = leader(proc, "k1")
        deadline = time.monotonic() + 4
        while time.monotonic() < deadline:
            proc.reconcile([DesiredAttempt(attempt_uid="k1", intent="run")])
            time.sleep(0.3)
        assert running(pid)
    finally:
        proc.stop()
        stub.stop()


def test_reconciles_that_do_not_renew_the_lease_still_let_the_worker_fence(tmp_path: Path) -> None:
    """After a lost answer the controller sends calls that do not renew the lease, so it can bound
    how long the worker's attempts may live; the worker answers them and fences all the same."""
    stub = ControllerStub(fence_after_s=2.0).start()
    proc = start_worker(tmp_path, stub.url, "--reregister-after", "60")
    try:
        proc.reconcile([run("n1", "sleep", "100")])
        pid = leader(proc, "n1")
        started = time.monotonic()
        while running(pid):
            answer = proc.reconcile([DesiredAttempt(attempt_uid="n1", intent="run")], renew_lease=False)
            assert answer.observations, "the worker stopped answering"
            assert time.monotonic() - started < 15, "the attempt was never fenced"
            time.sleep(0.2)
        assert time.monotonic() - started >= 1.5
        assert "fenced: the controller has not reconciled this worker" in log_text(proc, "n1")
    finally:
        proc.stop()
        stub.stop()


def test_a_worker_registered_later_than_its_grace_keeps_its_first_attempt(tmp_path: Path) -> None:
    """The grace runs from the first registration, and a reconcile marks contact (and the watchdog's
    heartbeat) before it starts anything: a slow registration must not fence the first attempt."""
    stub = ControllerStub(fence_after_s=1.0, register_delay_s=2.5).start()
    proc = start_worker(tmp_path, stub.url, "--reregister-after", "60")
    try:
        wait_until(lambda: stub.registrations, timeout=15, what="registration")
        proc.reconcile([run("f1", "sleep", "100")])
        pid = leader(proc, "f1")
        deadline = time.monotonic() + 3
        while time.monotonic() < deadline:
            assert running(pid), "the first attempt was fenced"
            proc.reconcile([DesiredAttempt(attempt_uid="f1", intent="run")])
            time.sleep(0.2)
        assert "fenced" not in log_text(proc, "f1")
    finally:
        proc.stop()
        stub.stop()


def test_sigstopped_worker_has_its_attempts_killed_while_it_is_stopped(tmp_path: Path) -> None:
    stub = ControllerStub(fence_after_s=1.5).start()
    proc = start_worker(tmp_path, stub.url, "--reregister-after", "60")
    try:
        proc.reconcile([run("s1", "sh", "-c", "sleep 100 & sleep 100")])
        pid = leader(proc, "s1")
        proc.popen.send_signal(signal.SIGSTOP)
        try:
            # The daemon cannot act, its watchdog does: the whole tree dies while the daemon is stopped.
            wait_until(lambda: not group_alive(pid), timeout=15, what="the stopped worker's attempt to die")
        finally:
            proc.popen.send_signal(signal.SIGCONT)
        # Continued, the worker reports the attempt as killed by fencing (infrastructure), not failed.
        seen: list[AttemptObservation] = []

        def reported_killed() -> bool:
            seen.append(proc.observe([DesiredAttempt(attempt_uid="s1", intent="run")], "s1"))
            return seen[-1].state is TaskState.KILLED

        try:
            wait_until(reported_killed, timeout=15, what="the fenced attempt to be reported KILLED")
        except AssertionError as exc:  # once in a loaded full run: say what the worker reported
            marks = sorted(p.name for p in (proc.state_dir / "fenced").glob("*"))
            raise AssertionError(
                f"{exc}; last reported {seen[-1:]!r}; fence marks {marks}; log {log_text(proc, 's1')[-1500:]!r}"
            ) from None
    finally:
        proc.stop()
        stub.stop()


def test_kill_9_of_the_worker_leaves_no_task_process(tmp_path: Path) -> None:
    stub = ControllerStub().start()
    proc = start_worker(tmp_path, stub.url)
    try:
        proc.reconcile([run("o1", "sleep", "100"), run("o2", "sh", "-c", "sleep 100 & sleep 100")])
        pids = [leader(proc, "o1"), leader(proc, "o2")]
        assert all(group_alive(pid) for pid in pids)
        os.kill(proc.popen.pid, signal.SIGKILL)
        proc.popen.wait()
        # Background children included: nothing of the attempts outlives the daemon.
        wait_until(lambda: not any(group_alive(pid) for pid in pids), timeout=15, what="orphans to die")
    finally:
        proc.stop()
        stub.stop()


def test_reregistration_does_not_clear_reconcile_failures() -> None:
    health = WorkerHealthTracker(grace_s=10.0, min_failures=3)
    health.register("w", 0.0)
    for t in (1.0, 2.0, 3.0):
        health.apply("w", HealthEvent.UNREACHABLE, t)
        health.register("w", t)  # a one-way partition: the worker still reaches us, we cannot reach it
    assert health.consecutive_failures("w") == 3
    assert health.status("w") is WorkerStatus.DEGRADED
    health.apply("w", HealthEvent.REACHED, 4.0)
    assert health.consecutive_failures("w") == 0


def test_a_reconcile_whose_answer_was_lost_holds_the_reap_until_the_worker_has_fenced() -> None:
    """The request may have reached the worker and renewed its fencing lease: its attempts may run
    until the fence and the kill have run out after that call, so retrying them before would run
    them twice at once. A refused connection delivered nothing and holds nothing."""
    health = WorkerHealthTracker(grace_s=3.0, min_failures=1)
    assert health.hold_s == fence_after(3.0) + KILL_ALLOWANCE_S
    for worker_id in ("lost-answer", "refused"):
        health.register(worker_id, 0.0)
        health.apply(worker_id, HealthEvent.REACHED, 1.0, may_have_arrived=True)
    health.apply("lost-answer", HealthEvent.UNREACHABLE, 2.5, may_have_arrived=True)
    health.apply("refused", HealthEvent.UNREACHABLE, 2.5, may_have_arrived=False)
    # The last answered call (at 1.0) renewed both leases too: the grace alone (3 s) is too short.
    assert health.over_threshold(4.0) == []
    assert health.over_threshold(1.0 + health.hold_s) == ["refused"]
    assert health.over_threshold(2.5 + health.hold_s - 0.01) == ["refused"]
    assert health.over_threshold(2.5 + health.hold_s) == ["lost-answer", "refused"]
    # Calls after a lost answer do not renew the lease, so a stopped worker whose socket still
    # takes them in is reaped all the same.
    health.apply("lost-answer", HealthEvent.UNREACHABLE, 9.0, may_have_arrived=False)
    assert "lost-answer" in health.over_threshold(9.0)


def test_fencing_grace_is_well_inside_the_reap_grace() -> None:
    for reap in (10.0, 50.0, 300.0):
        fence = fence_after(reap)
        assert 0 < fence <= reap - 3.0 or fence == reap / 2
        assert fence < reap
