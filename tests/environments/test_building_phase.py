"""The runtime's BUILDING phase with a scripted preparer: it waits without blocking the caller,
applies the prepared env and Python, fails with the preparer's sentence, and a stop ends it at once."""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from tests.conftest import TEST_WORKER_ID
from tests.runtime.helpers import make_spec, wait_done

from iris.cluster.runtime import KillReason, SubprocessRuntime
from iris.cluster.runtime.subprocess_runtime import Preparation, PreparationError
from iris.rpc.enums import TaskState
from iris.rpc.models import Entrypoint, RunSpec


def _print_marker() -> None:
    import os

    print("marker", os.environ.get("FROM_PREP"))


class ScriptedPreparer:
    def __init__(self) -> None:
        self.release = threading.Event()
        self.outcome: Preparation | Exception = Preparation()
        self.saw_cancel = threading.Event()
        self.work_dirs: list[Path] = []

    def needed(self, spec: RunSpec) -> bool:
        return spec.env.get("PREPARE") == "1"

    def prepare(
        self, spec: RunSpec, work_dir: Path, log: Callable[[str], None], cancelled: Callable[[], bool]
    ) -> Preparation:
        self.work_dirs.append(work_dir)
        log("preparing...")
        (work_dir / "from_bundle.txt").write_text("unpacked\n")
        while not self.release.wait(0.02):
            if cancelled():
                self.saw_cancel.set()
                raise RuntimeError("cancelled")
        if isinstance(self.outcome, Exception):
            raise self.outcome
        return self.outcome


@pytest.fixture
def preparer() -> ScriptedPreparer:
    return ScriptedPreparer()


@pytest.fixture
def runtime(tmp_path: Path, preparer: ScriptedPreparer) -> Iterator[SubprocessRuntime]:
    rt = SubprocessRuntime(
        tmp_path / "state",
        worker_id=TEST_WORKER_ID,
        controller_url="http://127.0.0.1:1",
        kill_grace_s=1.0,
        monitor_interval_s=0.05,
        preparer=preparer,
    )
    yield rt
    preparer.release.set()
    rt.shutdown()


def lines(rt: SubprocessRuntime, uid: str) -> list[tuple[str, str]]:
    return [(line.stream, line.line) for line in rt.read_logs(uid).lines]


def test_building_does_not_block_and_the_prepared_env_applies(
    runtime: SubprocessRuntime, preparer: ScriptedPreparer, tmp_path: Path
) -> None:
    bin_dir = tmp_path / "envbin"
    bin_dir.mkdir()
    preparer.outcome = Preparation(env={"FROM_PREP": "yes"}, path_prepend=(str(bin_dir),))
    spec = make_spec(
        "sh", "-c", 'cat from_bundle.txt; echo "$FROM_PREP"; echo "${PATH%%:*}"', env={"PREPARE": "1"}
    )
    t0 = time.monotonic()
    snap = runtime.start(spec)
    assert time.monotonic() - t0 < 2.0
    assert snap.state is TaskState.BUILDING
    assert runtime.snapshot(spec.attempt_uid).state is TaskState.BUILDING  # type: ignore[union-attr]
    preparer.release.set()
    done = wait_done(runtime, spec.attempt_uid)
    assert done.state is TaskState.SUCCEEDED
    out = lines(runtime, spec.attempt_uid)
    assert ("system", "preparing...") in out
    assert [text for stream, text in out if stream == "stdout"] == ["unpacked", "yes", str(bin_dir)]


def test_callable_runs_with_the_prepared_python(
    runtime: SubprocessRuntime, preparer: ScriptedPreparer, tmp_path: Path
) -> None:
    wrapper = tmp_path / "python-wrapper"
    wrapper.write_text(f'#!/bin/sh\necho via-wrapper\nexec {sys.executable} "$@"\n')
    wrapper.chmod(0o755)
    preparer.outcome = Preparation(env={"FROM_PREP": "ok"}, python=str(wrapper))
    preparer.release.set()
    spec = make_spec(entrypoint=Entrypoint.from_callable(_print_marker), env={"PREPARE": "1"})
    runtime.start(spec)
    assert wait_done(runtime, spec.attempt_uid).state is TaskState.SUCCEEDED
    stdout = [text for stream, text in lines(runtime, spec.attempt_uid) if stream == "stdout"]
    assert stdout == ["via-wrapper", "marker ok"]


def test_preparation_error_fails_the_attempt_with_its_sentence(
    runtime: SubprocessRuntime, preparer: ScriptedPreparer
) -> None:
    preparer.outcome = PreparationError("could not fetch bundle abc: HTTP 404")
    preparer.release.set()
    spec = make_spec("true", env={"PREPARE": "1"})
    runtime.start(spec)
    snap = wait_done(runtime, spec.attempt_uid)
    assert snap.state is TaskState.FAILED
    assert snap.error == "could not fetch bundle abc: HTTP 404"
    assert snap.exit_code is None and snap.started_at is None
    assert ("system", "could not fetch bundle abc: HTTP 404") in lines(runtime, spec.attempt_uid)


def test_stop_while_building_ends_it_without_a_process(
    runtime: SubprocessRuntime, preparer: ScriptedPreparer
) -> None:
    spec = make_spec("sh", "-c", "echo should-not-run", env={"PREPARE": "1"})
    runtime.start(spec)
    runtime.kill(spec.attempt_uid, KillReason.STOP, "stopped by the controller (test)")
    assert preparer.saw_cancel.wait(5)
    snap = wait_done(runtime, spec.attempt_uid)
    assert snap.state is TaskState.KILLED and snap.exit_code is None and snap.started_at is None
    out = lines(runtime, spec.attempt_uid)
    assert not any(stream == "stdout" for stream, _ in out)
    assert any("before it started" in text for _, text in out)


def test_attempts_without_preparation_take_the_fast_path(
    runtime: SubprocessRuntime, preparer: ScriptedPreparer
) -> None:
    spec = make_spec("true")
    snap = runtime.start(spec)
    assert snap.state is TaskState.RUNNING or snap.terminal
    assert wait_done(runtime, spec.attempt_uid).state is TaskState.SUCCEEDED
    assert preparer.work_dirs == []
