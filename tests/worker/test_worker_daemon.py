"""The worker daemon as a real process, driven over HTTP like the controller drives it."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
from tests.conftest import TEST_WORKER_ID
from tests.runtime.helpers import recorded_pgids
from tests.worker.harness import CLICK_ENTRY, ControllerStub, WorkerProcess, start_worker, wait_until

from iris.rpc.enums import StopReason, TaskState
from iris.rpc.models import DesiredAttempt, Entrypoint, ResourceSpec, RunSpec


@pytest.fixture
def controller() -> Iterator[ControllerStub]:
    stub = ControllerStub().start()
    yield stub
    stub.stop()


@pytest.fixture
def worker(tmp_path: Path, controller: ControllerStub) -> Iterator[WorkerProcess]:
    proc = start_worker(tmp_path, controller.url, "--reregister-after", "30")
    yield proc
    proc.stop()


def spec(uid: str, *argv: str, index: int = 0) -> RunSpec:
    return RunSpec(
        attempt_uid=uid,
        attempt_number=0,
        job_id="/alice/train",
        task_id=f"/alice/train/{index}",
        task_index=index,
        entrypoint=Entrypoint.from_command(*argv),
        resources=ResourceSpec(cpu=1, memory="1GB"),
    )


def run(uid: str, *argv: str) -> DesiredAttempt:
    """A run intent; with argv it carries the spec (the dispatch tick), without it is a bare keep."""
    return DesiredAttempt(attempt_uid=uid, intent="run", spec=spec(uid, *argv) if argv else None)


def stop(uid: str, reason: StopReason = StopReason.CANCELLED) -> DesiredAttempt:
    return DesiredAttempt(attempt_uid=uid, intent="stop", stop_reason=reason)


def process_gone(pgid: int) -> bool:
    """No live member in the process group (a killed zombie awaiting its reaper counts as gone)."""
    return not any(_pgid(pid) == pgid and not _zombie(pid) for pid in psutil.pids())


def _zombie(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def attempt_pgid(worker: WorkerProcess, uid: str) -> int:
    return recorded_pgids(worker.state_dir / "pids")[uid]


def _pgid(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except ProcessLookupError:
        return None


def test_registers_with_capacity_attributes_and_address(tmp_path: Path, controller: ControllerStub) -> None:
    proc = start_worker(
        tmp_path,
        controller.url,
        "--cpu",
        "500m",
        "--memory",
        "4GB",
        "--attr",
        "zone=us-a",
        "--attr",
        "pool=x",
        "--device",
        "gpu:a100:2",
        "--slice-id",
        "slice-1",
        "--scale-group",
        "cpu-small",
    )
    try:
        wait_until(lambda: controller.registrations, what="registration")
        reg = controller.registrations[0]
        assert reg.worker_id == TEST_WORKER_ID and reg.address == proc.address
        assert reg.capacity.cpu_millicores == 500 and reg.capacity.memory_bytes == 4 * 1000**3
        assert reg.capacity.device is not None and reg.capacity.device.count == 2
        # --device also advertises device-type/-variant, so constraints can name them.
        assert reg.attributes == {"zone": "us-a", "pool": "x", "device-type": "gpu", "device-variant": "a100"}
        assert (reg.slice_id, reg.scale_group) == ("slice-1", "cpu-small")
        assert proc.http.get("/healthz").json() == {"worker_id": TEST_WORKER_ID, "ok": True}
    finally:
        assert proc.stop() == 0


def test_spec_on_first_call_then_bare_keeps(worker: WorkerProcess) -> None:
    first = worker.reconcile([run("a1", "sleep", "30")])
    assert first.worker_id == TEST_WORKER_ID
    assert [(o.attempt_uid, o.state) for o in first.observations] == [("a1", TaskState.RUNNING)]
    assert first.observations[0].started_at is not None and not first.observations[0].runtime_released
    assert first.health.healthy and first.health.running_attempts == 1 and first.health.disk_free_bytes > 0
    keep = worker.reconcile([run("a1")])
    assert [(o.attempt_uid, o.state) for o in keep.observations] == [("a1", TaskState.RUNNING)]
    # The same spec sent again starts nothing new.
    again = worker.reconcile([run("a1", "sleep", "30")])
    assert again.health.running_attempts == 1


def test_finished_attempt_reports_exit_code_and_release(worker: WorkerProcess) -> None:
    worker.reconcile([run("ok", "true"), run("bad", "sh", "-c", "exit 3")])

    def both_done() -> bool:
        obs = {o.attempt_uid: o for o in worker.reconcile([run("ok"), run("bad")]).observations}
        return all(
            o.runtime_released and o.state in (TaskState.SUCCEEDED, TaskState.FAILED) for o in obs.values()
        )

    wait_until(both_done, what="attempts to finish")
    obs = {o.attempt_uid: o for o in worker.reconcile([run("ok"), run("bad")]).observations}
    assert (obs["ok"].state, obs["ok"].exit_code) == (TaskState.SUCCEEDED, 0)
    assert (obs["bad"].state, obs["bad"].exit_code, obs["bad"].error) == (
        TaskState.FAILED,
        3,
        "exited with code 3",
    )
    assert obs["bad"].finished_at >= obs["bad"].started_at


def test_unknown_attempt_without_spec_is_missing(worker: WorkerProcess) -> None:
    answer = worker.reconcile([run("never-seen"), stop("never-seen-either")])
    assert [(o.attempt_uid, o.state, o.runtime_released) for o in answer.observations] == [
        ("never-seen", TaskState.MISSING, True),
        ("never-seen-either", TaskState.MISSING, True),
    ]


def test_stop_intent_kills_the_attempt(worker: WorkerProcess) -> None:
    worker.reconcile([run("s1", "sh", "-c", "sleep 100 & sleep 100")])
    pgid = attempt_pgid(worker, "s1")
    worker.reconcile([stop("s1", StopReason.PREEMPTED)])
    wait_until(lambda: worker.observe([stop("s1", StopReason.PREEMPTED)], "s1").runtime_released, what="kill")
    final = worker.observe([stop("s1")], "s1")
    assert final.state is TaskState.KILLED and "PREEMPTED" in final.error
    assert process_gone(pgid)


def test_attempt_left_out_of_the_desired_set_is_killed_as_a_zombie(worker: WorkerProcess) -> None:
    worker.reconcile([run("z1", "sleep", "100"), run("keep", "sleep", "100")])
    pgid = attempt_pgid(worker, "z1")
    answer = worker.reconcile([run("keep")])
    # The zombie is reported in the very answer that kills it.
    assert {o.attempt_uid for o in answer.observations} == {"keep", "z1"}
    wait_until(lambda: process_gone(pgid), what="zombie tree to die")
    later = worker.reconcile([run("keep")])
    assert [o.attempt_uid for o in later.observations] == ["keep"]
    assert later.observations[0].state is TaskState.RUNNING


def test_wrong_worker_id_is_rejected_with_409(worker: WorkerProcess) -> None:
    answer = worker.http.post("/reconcile", json={"worker_id": "someone-else", "attempts": []})
    assert answer.status_code == 409
    error = answer.json()["error"]
    assert error["code"] == "failed_precondition" and TEST_WORKER_ID in error["message"]


def test_malformed_reconcile_is_a_400_with_a_message(worker: WorkerProcess) -> None:
    answer = worker.http.post("/reconcile", json={"worker_id": TEST_WORKER_ID})
    assert answer.status_code == 400 and "attempts" in answer.json()["error"]["message"]


def test_nudge_arrives_when_an_attempt_finishes(worker: WorkerProcess, controller: ControllerStub) -> None:
    wait_until(lambda: controller.registrations, what="registration")
    worker.reconcile([run("n1", "sleep", "0.3")])
    began = time.time()
    wait_until(lambda: controller.nudges_from(TEST_WORKER_ID, since=began), what="nudge after finish")
    assert worker.observe([run("n1")], "n1").state is TaskState.SUCCEEDED


def test_logs_endpoint_pages_lines(worker: WorkerProcess) -> None:
    worker.reconcile([run("l1", "sh", "-c", "for i in 1 2 3 4 5; do echo out$i; done; echo err >&2")])
    wait_until(lambda: worker.observe([run("l1")], "l1").state is TaskState.SUCCEEDED, what="finish")
    lines, offset = [], 0
    while True:
        page = worker.http.get("/attempts/l1/logs", params={"offset": offset, "limit": 3}).json()
        assert len(page["lines"]) <= 3
        lines += page["lines"]
        offset = page["next_offset"]
        if page["complete"]:
            break
    user = [(line["stream"], line["line"]) for line in lines if line["stream"] != "system"]
    assert [text for stream, text in user if stream == "stdout"] == [f"out{i}" for i in range(1, 6)]
    assert ("stderr", "err") in user
    assert all(isinstance(line["ts"], float) for line in lines)
    missing = worker.http.get("/attempts/nope/logs")
    assert missing.status_code == 404 and "nope" in missing.json()["error"]["message"]


def test_reregisters_after_the_controller_restarts(tmp_path: Path) -> None:
    stub = ControllerStub().start()
    proc = start_worker(tmp_path, stub.url, "--reregister-after", "0.5")
    try:
        wait_until(lambda: stub.registrations, what="first registration")
        proc.reconcile([run("r1", "sleep", "60")])
        stub.stop()
        restarted = ControllerStub(port=stub.port).start()
        try:
            wait_until(
                lambda: restarted.registrations, timeout=15, what="registration with the new controller"
            )
            assert restarted.registrations[0].worker_id == TEST_WORKER_ID
            # The attempt kept running through the outage.
            assert proc.observe([run("r1")], "r1").state is TaskState.RUNNING
        finally:
            restarted.stop()
    finally:
        assert proc.stop() == 0


def test_keeps_retrying_registration_while_the_controller_is_down(tmp_path: Path) -> None:
    stub = ControllerStub()
    stub.start()
    port = stub.port
    stub.stop()
    proc = start_worker(tmp_path, f"http://127.0.0.1:{port}", wait_registered=False)
    try:
        assert proc.popen.poll() is None
        late = ControllerStub(port=port).start()
        try:
            wait_until(lambda: late.registrations, timeout=15, what="registration once the controller is up")
        finally:
            late.stop()
    finally:
        assert proc.stop() == 0


def test_nudge_answered_404_triggers_registration(tmp_path: Path) -> None:
    stub = ControllerStub().start()
    proc = start_worker(tmp_path, stub.url, "--reregister-after", "60")
    try:
        wait_until(lambda: stub.registrations, what="registration")
        stub.stop()
        forgetful = ControllerStub(port=stub.port).start()  # knows no worker: nudges get 404
        try:
            proc.reconcile([run("f1", "true")])
            wait_until(lambda: forgetful.registrations, timeout=10, what="registration after a 404 nudge")
            assert forgetful.nudges_from(TEST_WORKER_ID) >= 1
        finally:
            forgetful.stop()
    finally:
        assert proc.stop() == 0


def test_sigterm_kills_attempts_and_exits_zero(tmp_path: Path, controller: ControllerStub) -> None:
    proc = start_worker(tmp_path, controller.url)
    proc.reconcile([run("t1", "sh", "-c", "sleep 100 & sleep 100"), run("t2", "sleep", "100")])
    pgids = [attempt_pgid(proc, "t1"), attempt_pgid(proc, "t2")]
    assert proc.stop() == 0
    assert all(process_gone(pgid) for pgid in pgids)
    assert "Traceback" not in proc.stderr()


def test_a_killed_worker_leaves_no_tree_and_its_successor_reports_missing(
    tmp_path: Path, controller: ControllerStub
) -> None:
    proc = start_worker(tmp_path, controller.url)
    proc.reconcile([run("o1", "sh", "-c", "sleep 100 & sleep 100")])
    pgid = attempt_pgid(proc, "o1")
    proc.popen.kill()  # kill -9: its watchdog kills the attempt tree, background child included
    proc.popen.wait()
    wait_until(lambda: process_gone(pgid), what="the dead worker's tree to be killed")
    again = start_worker(tmp_path, controller.url)
    try:
        # The new incarnation lost the spec: the controller learns the attempt is MISSING.
        assert again.observe([run("o1")], "o1").state is TaskState.MISSING
    finally:
        again.stop()


def test_iris_worker_start_runs_the_same_daemon(tmp_path: Path, controller: ControllerStub) -> None:
    proc = start_worker(tmp_path, controller.url, "--attr", "via=click", entry=CLICK_ENTRY)
    try:
        wait_until(lambda: controller.registrations, what="registration")
        assert controller.registrations[0].attributes == {"via": "click"}
        assert proc.observe([run("c1", "true")], "c1").state in (TaskState.RUNNING, TaskState.SUCCEEDED)
    finally:
        assert proc.stop() == 0


def test_new_attempt_of_a_task_supersedes_the_live_one(worker: WorkerProcess) -> None:
    worker.reconcile([run("v1", "sleep", "100")])
    answer = worker.reconcile([run("v1"), run("v2", "sleep", "100")])
    assert {o.attempt_uid: o.state for o in answer.observations}["v2"] is TaskState.RUNNING

    def v1_gone() -> bool:
        return worker.observe([run("v1"), run("v2")], "v1").runtime_released

    wait_until(v1_gone, what="superseded attempt to be killed")
    old = worker.observe([run("v1"), run("v2")], "v1")
    assert old.state is TaskState.KILLED and "superseded by attempt v2" in old.error
