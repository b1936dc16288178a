"""A worker started again on its state dir removes the containers its previous run left (found by
their labels), as it kills the process trees a previous run left; other workers' containers stay."""

from __future__ import annotations

import subprocess
import uuid
from pathlib import Path

import pytest

from iris.cluster.runtime.container import MANAGED_LABEL, ContainerTaskRuntime, container_name
from iris.cluster.runtime.subprocess_runtime import SubprocessRuntime
from iris.testing import container_engine as engines
from iris.testing.images import BUSYBOX_IMAGE

pytestmark = pytest.mark.skipif(not engines.available(), reason="dockerd is not installed")


def _docker(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([engines.docker_cli(), *args], capture_output=True, text=True, timeout=60)


def _leave_container(worker: str, attempt: str) -> str:
    name = container_name(worker, attempt)
    started = _docker(
        "run", "-d", "--name", name, "--label", f"{MANAGED_LABEL}=true", "--label", f"iris.worker={worker}",
        "--label", f"iris.attempt={attempt}", BUSYBOX_IMAGE, "sleep", "600",
    )  # fmt: skip
    assert started.returncode == 0, started.stderr
    return name


def test_a_restarted_worker_removes_what_its_previous_run_left(
    container_engine: engines.Engine, tmp_path: Path
) -> None:
    me, other = f"w-{uuid.uuid4().hex[:8]}", f"w-{uuid.uuid4().hex[:8]}"
    mine = [_leave_container(me, "a1"), _leave_container(me, "a2")]
    theirs = _leave_container(other, "a1")
    try:
        (tmp_path / "containers-used").touch()  # the previous run of this worker ran containers
        runtime = SubprocessRuntime(
            tmp_path, worker_id=me, controller_url="http://127.0.0.1:9", containers=ContainerTaskRuntime(me)
        )
        try:
            assert sorted(runtime.containers_removed) == sorted(mine)
        finally:
            runtime.shutdown()
        listed = _docker("ps", "-a", "--format", "{{.Names}}").stdout.split()
        assert not set(mine) & set(listed) and theirs in listed
    finally:
        _docker("rm", "-f", *mine, theirs)
