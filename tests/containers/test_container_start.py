"""Starting a container attempt: once the worker has seen the attempt's image, the attempt starts on
the starting call itself (RUNNING in the answer of the reconcile that starts it), with no BUILDING
phase on a thread of its own and so no second report to the controller; an image not seen yet is
looked at first (BUILDING), as before."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from iris.cluster.runtime.container import ContainerTaskRuntime
from iris.cluster.runtime.subprocess_runtime import SubprocessRuntime
from iris.rpc.enums import TaskState
from iris.rpc.models import Entrypoint, ResourceSpec, RunSpec
from iris.testing import container_engine as engines
from iris.testing.images import BUSYBOX_IMAGE

pytestmark = pytest.mark.skipif(not engines.available(), reason="dockerd is not installed")


def _spec(uid: str, index: int) -> RunSpec:
    return RunSpec(
        attempt_uid=uid,
        attempt_number=0,
        job_id="/test/start",
        task_id=f"/test/start/{index}",
        task_index=index,
        entrypoint=Entrypoint.from_command("sleep", "30"),
        resources=ResourceSpec(cpu=0.1, memory="64MB"),
        image=BUSYBOX_IMAGE,
    )


def test_an_attempt_whose_image_was_seen_starts_running_at_once(
    container_engine: engines.Engine, tmp_path: Path
) -> None:
    me = f"w-{uuid.uuid4().hex[:8]}"
    runtime = SubprocessRuntime(
        tmp_path, worker_id=me, controller_url="http://127.0.0.1:9", containers=ContainerTaskRuntime(me)
    )
    try:
        first = runtime.start(_spec("a1", 0))
        assert first.state is TaskState.BUILDING  # its image is looked at first, off the calling thread

        def running(uid: str) -> bool:
            snap = runtime.snapshot(uid)
            return snap is not None and snap.state is TaskState.RUNNING

        assert runtime.wait_for(lambda: running("a1"), timeout=60)
        second = runtime.start(_spec("a2", 1))
        assert second.state is TaskState.RUNNING
        assert second.started_at is not None
    finally:
        runtime.shutdown()
