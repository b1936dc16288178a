"""Helpers shared by the runtime tests (and the worker tests)."""

from __future__ import annotations

import itertools
from pathlib import Path

from tests.conftest import TEST_WORKER_ID

from iris.cluster.runtime import SubprocessRuntime
from iris.cluster.runtime.pid_records import load_pid_records
from iris.rpc.enums import TERMINAL_TASK_STATES
from iris.rpc.models import Entrypoint, ResourceSpec, RunSpec

_uids = itertools.count()


def make_spec(*argv: str, entrypoint: Entrypoint | None = None, uid: str | None = None, **fields) -> RunSpec:
    index = next(_uids)
    return RunSpec(
        attempt_uid=uid or f"att{index:05d}",
        attempt_number=0,
        job_id="/alice/train",
        task_id="/alice/train/0",
        task_index=0,
        entrypoint=entrypoint or Entrypoint.from_command(*argv),
        resources=fields.pop("resources", ResourceSpec(cpu=1, memory="1GB")),
        **fields,
    )


def recorded_pgids(pids_dir: Path) -> dict[str, int]:
    """Attempt uid -> process group, for every attempt the pid journal records as running."""
    return {record.attempt_uid: record.pgid for record in load_pid_records(pids_dir)}


def new_runtime(tmp_path: Path) -> SubprocessRuntime:
    return SubprocessRuntime(
        tmp_path / "state",
        worker_id=TEST_WORKER_ID,
        controller_url="http://127.0.0.1:1",
        kill_grace_s=1.0,
        monitor_interval_s=0.05,
    )


def wait_done(rt: SubprocessRuntime, uid: str, timeout: float = 15.0):
    """Wait until the attempt ended and its process tree is gone; return its snapshot."""

    def done() -> bool:
        snap = rt.snapshot(uid)
        return snap is not None and snap.state in TERMINAL_TASK_STATES and snap.runtime_released

    assert rt.wait_for(done, timeout), f"attempt {uid} did not finish: {rt.snapshot(uid)}"
    return rt.snapshot(uid)
