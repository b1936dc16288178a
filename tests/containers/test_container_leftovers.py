"""A worker started again on its state dir adopts the containers its previous run left running
(found by their labels and their working dir under its own), removes the ones that are not
running, and leaves other workers' containers alone (another cluster's worker may have its id)."""

from __future__ import annotations

import subprocess
import uuid
from pathlib import Path

import pytest
from tests.conftest import wait_until

from iris.cluster.runtime import KillReason
from iris.cluster.runtime.container import MANAGED_LABEL, ContainerTaskRuntime, container_name
from iris.cluster.runtime.subprocess_runtime import SubprocessRuntime
from iris.rpc.enums import TaskState
from iris.testing import container_engine as engines
from iris.testing.images import BUSYBOX_IMAGE

pytestmark = pytest.mark.skipif(not engines.available(), reason="dockerd is not installed")


def _docker(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([engines.docker_cli(), *args], capture_output=True, text=True, timeout=60)


def _leave_container(worker: str, attempt: str, work_root: Path, *, start: bool = True) -> str:
    name = container_name(worker, attempt)
    work_dir = work_root / attempt
    work_dir.mkdir(parents=True, exist_ok=True)
    started = _docker(
        "run" if start else "create", *(["-d"] if start else []), "--rm", "--init", "--name", name,
        "--label", f"{MANAGED_LABEL}=true", "--label", f"iris.worker={worker}",
        "--label", f"iris.attempt={attempt}", "--label", "iris.task=/t/0",
        "-v", f"{work_dir}:{work_dir}", "-w", str(work_dir),
        BUSYBOX_IMAGE, "sh", "-c", "echo before; echo err-before >&2; sleep 600",
    )  # fmt: skip
    assert started.returncode == 0, started.stderr
    return name


def test_a_restarted_worker_adopts_running_containers_and_removes_the_rest(
    container_engine: engines.Engine, tmp_path: Path
) -> None:
    me, other = f"w-{uuid.uuid4().hex[:8]}", f"w-{uuid.uuid4().hex[:8]}"
    state = tmp_path / "state"
    running = _leave_container(me, "a1", state / "work")
    created = _leave_container(me, "a2", state / "work", start=False)
    theirs = _leave_container(other, "a1", tmp_path / "other")
    same_id_elsewhere = _leave_container(me, "a3", tmp_path / "another-cluster")
    everything = [running, created, theirs, same_id_elsewhere]
    try:
        (state / "attempts").mkdir(parents=True)
        # What the previous run had logged of a1: its first stdout line.
        (state / "attempts" / "a1.jsonl").write_text('{"ts":1.0,"stream":"stdout","line":"before"}\n')
        (state / "containers-used").touch()  # the previous run of this worker ran containers
        runtime = SubprocessRuntime(
            state, worker_id=me, controller_url="http://127.0.0.1:9", containers=ContainerTaskRuntime(me)
        )
        try:
            assert runtime.containers_adopted == ["a1"]
            assert runtime.containers_removed == [created]
            snapshot = runtime.snapshot("a1")
            assert snapshot is not None and snapshot.state is TaskState.RUNNING
            assert runtime.live_task_ids() == {"a1": "/t/0"}
            page = wait_until(
                lambda: (p := runtime.read_logs("a1")) and any(x.line == "err-before" for x in p.lines) and p,
                timeout=30,
                what="the adopted container's output",
            )
            output = [line.line for line in page.lines if line.stream != "system"]
            assert output == ["before", "err-before"]  # the line logged before is not logged again
            runtime.kill("a1", KillReason.ZOMBIE)  # the first reconcile did not ask for it
            wait_until(lambda: runtime.snapshot("a1").runtime_released, timeout=30, what="a1 released")
            assert runtime.snapshot("a1").state is TaskState.KILLED
        finally:
            runtime.shutdown()
        listed = _docker("ps", "-a", "--format", "{{.Names}}").stdout.split()
        assert running not in listed and created not in listed
        assert theirs in listed and same_id_elsewhere in listed
    finally:
        _docker("rm", "-f", *everything)
