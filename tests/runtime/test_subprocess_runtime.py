"""The subprocess runtime with real processes: logs, exit codes, kills, limits, env, callables."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
from tests.conftest import TEST_WORKER_ID
from tests.runtime.helpers import make_spec, new_runtime, recorded_pgids, wait_done

from iris.cluster.runtime import KillReason, SubprocessRuntime, subprocess_runtime
from iris.cluster.runtime.attempt_log import encode_line
from iris.rpc.enums import TaskState
from iris.rpc.errors import NotFound
from iris.rpc.models import Entrypoint, EnvironmentSpec, ResourceSpec


@pytest.fixture
def runtime(tmp_path: Path) -> Iterator[SubprocessRuntime]:
    rt = new_runtime(tmp_path)
    yield rt
    rt.shutdown()


def wait_until(predicate, timeout: float = 10.0, interval: float = 0.02) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(interval)


def pid_alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def test_output_is_captured_with_timestamps_and_streams(runtime: SubprocessRuntime) -> None:
    before = time.time()
    spec = make_spec("sh", "-c", "echo hello; echo oops >&2; printf 'no newline'")
    runtime.start(spec)
    snap = wait_done(runtime, spec.attempt_uid)
    assert snap.state is TaskState.SUCCEEDED and snap.exit_code == 0
    page = runtime.read_logs(spec.attempt_uid)
    assert page.complete
    user_lines = [(line.stream, line.line) for line in page.lines if line.stream != "system"]
    assert sorted(user_lines) == [("stderr", "oops"), ("stdout", "hello"), ("stdout", "no newline")]
    assert all(before <= line.ts <= time.time() for line in page.lines)
    assert page.lines[0].stream == "system" and "started process" in page.lines[0].line
    assert page.lines[-1].stream == "system" and "SUCCEEDED" in page.lines[-1].line
    raw = (runtime.attempts_dir / f"{spec.attempt_uid}.jsonl").read_text().splitlines()
    assert [set(json.loads(r)) for r in raw] == [{"ts", "stream", "line"}] * len(raw)


def test_logs_page_by_line_offset(runtime: SubprocessRuntime) -> None:
    spec = make_spec("sh", "-c", "for i in $(seq 1 25); do echo line$i; done")
    runtime.start(spec)
    wait_done(runtime, spec.attempt_uid)
    seen, offset = [], 0
    while True:
        page = runtime.read_logs(spec.attempt_uid, offset=offset, limit=10)
        seen += [line.line for line in page.lines if line.stream == "stdout"]
        offset = page.next_offset
        if page.complete:
            break
        assert len(page.lines) == 10
    assert seen == [f"line{i}" for i in range(1, 26)]
    assert offset == 27  # 25 lines plus the start and end system lines


def test_unknown_attempt_logs_raise_not_found(runtime: SubprocessRuntime) -> None:
    with pytest.raises(NotFound):
        runtime.read_logs("nope")
    with pytest.raises(NotFound):
        runtime.read_logs("../etc")


def test_nonzero_exit_code_is_reported(runtime: SubprocessRuntime) -> None:
    spec = make_spec("sh", "-c", "exit 7")
    runtime.start(spec)
    snap = wait_done(runtime, spec.attempt_uid)
    assert snap.state is TaskState.FAILED and snap.exit_code == 7 and snap.error == "exited with code 7"
    assert snap.started_at is not None and snap.finished_at >= snap.started_at


def test_missing_program_fails_to_start(runtime: SubprocessRuntime) -> None:
    spec = make_spec("/definitely/not/a/program")
    snap = runtime.start(spec)
    assert snap.state is TaskState.FAILED and snap.exit_code == 127 and snap.runtime_released
    assert "could not start" in snap.error


def test_kill_takes_down_the_whole_tree(runtime: SubprocessRuntime) -> None:
    spec = make_spec("sh", "-c", "sleep 100 & sleep 100 & wait")
    runtime.start(spec)
    pgid = recorded_pgids(runtime.pids_dir)[spec.attempt_uid]
    wait_until(lambda: len([p for p in psutil.process_iter() if _pgid(p.pid) == pgid]) >= 3)
    members = [p.pid for p in psutil.process_iter() if _pgid(p.pid) == pgid]
    runtime.kill(spec.attempt_uid, KillReason.STOP, "stopped by the controller (CANCELLED)")
    snap = wait_done(runtime, spec.attempt_uid)
    assert snap.state is TaskState.KILLED and snap.error == "stopped by the controller (CANCELLED)"
    assert not any(pid_alive(pid) for pid in members)
    assert spec.attempt_uid not in recorded_pgids(runtime.pids_dir)


def test_kill_reaches_a_descendant_that_left_the_group(runtime: SubprocessRuntime, tmp_path: Path) -> None:
    pidfile = tmp_path / "escapee.pid"
    script = f"setsid sh -c 'echo $$ > {pidfile}; exec sleep 100' & sleep 100"
    spec = make_spec("sh", "-c", script)
    runtime.start(spec)
    wait_until(lambda: pidfile.exists() and pidfile.read_text().strip().isdigit())
    escapee = int(pidfile.read_text())
    assert _pgid(escapee) != _pgid(os.getpid())
    runtime.kill(spec.attempt_uid, KillReason.STOP)
    wait_done(runtime, spec.attempt_uid)
    wait_until(lambda: not pid_alive(escapee), timeout=5)


def test_sigterm_ignoring_process_is_killed_after_the_grace(runtime: SubprocessRuntime) -> None:
    spec = make_spec("sh", "-c", "trap '' TERM; echo ready; while true; do sleep 0.05; done")
    runtime.start(spec)
    wait_until(lambda: any(line.line == "ready" for line in runtime.read_logs(spec.attempt_uid).lines))
    began = time.monotonic()
    runtime.kill(spec.attempt_uid, KillReason.STOP)
    snap = wait_done(runtime, spec.attempt_uid)
    assert snap.state is TaskState.KILLED and snap.exit_code == 137
    assert time.monotonic() - began >= 0.9  # the 1 s grace of the fixture


def test_memory_limit_kills_the_tree_with_an_oom_error(runtime: SubprocessRuntime) -> None:
    code = "import time; x = bytearray(200 * 1000**2); x[::4096] = b'x' * len(x[::4096]); time.sleep(60)"
    spec = make_spec(sys.executable, "-c", code, resources=ResourceSpec(cpu=1, memory="80MB"))
    runtime.start(spec)
    snap = wait_done(runtime, spec.attempt_uid)
    assert snap.state is TaskState.FAILED and snap.exit_code == 137
    assert snap.error.startswith("out of memory: used ") and snap.error.endswith(", limit 80MB")
    assert any("out of memory" in line.line for line in runtime.read_logs(spec.attempt_uid).lines)


def test_memory_under_the_limit_is_left_alone(runtime: SubprocessRuntime) -> None:
    spec = make_spec(
        sys.executable, "-c", "import time; time.sleep(0.5)", resources=ResourceSpec(memory="500MB")
    )
    runtime.start(spec)
    assert wait_done(runtime, spec.attempt_uid).state is TaskState.SUCCEEDED


def test_execution_timeout_fails_the_attempt(runtime: SubprocessRuntime) -> None:
    spec = make_spec("sleep", "30", timeout_s=0.3)
    runtime.start(spec)
    snap = wait_done(runtime, spec.attempt_uid)
    assert snap.state is TaskState.FAILED and snap.error == "timed out after 0.3s"
    assert snap.exit_code == 124, "a timeout exits 124, as timeout(1) does"


def test_environment_carries_job_env_and_iris_contract(runtime: SubprocessRuntime) -> None:
    spec = make_spec(
        "env",
        env={"JOB_VAR": "1", "IRIS_TASK_ID": "cannot override"},
        environment=EnvironmentSpec(env_vars={"EXTRA": "two"}),
        ports=["http", "grpc-api"],
    )
    runtime.start(spec)
    wait_done(runtime, spec.attempt_uid)
    env = dict(
        line.line.split("=", 1)
        for line in runtime.read_logs(spec.attempt_uid).lines
        if line.stream == "stdout"
    )
    assert env["JOB_VAR"] == "1" and env["EXTRA"] == "two"
    assert env["IRIS_TASK_ID"] == "/alice/train/0"
    assert env["IRIS_JOB_ID"] == "/alice/train"
    assert env["IRIS_TASK_INDEX"] == "0"
    assert env["IRIS_ATTEMPT_UID"] == spec.attempt_uid
    assert env["IRIS_ATTEMPT_NUMBER"] == "0"
    assert env["IRIS_WORKER_ID"] == TEST_WORKER_ID
    assert env["IRIS_CONTROLLER_URL"] == "http://127.0.0.1:1"
    assert env["PATH"] == os.environ["PATH"]
    ports = {int(env["IRIS_PORT_HTTP"]), int(env["IRIS_PORT_GRPC_API"])}
    assert len(ports) == 2 and all(1024 <= p <= 65535 for p in ports)
    assert env["PWD"] == str(runtime.state_dir / "work" / spec.attempt_uid)


def test_callable_entrypoint_runs_and_prints(runtime: SubprocessRuntime) -> None:
    spec = make_spec(entrypoint=Entrypoint.from_callable(print, "hello from a callable,", "iris"))
    runtime.start(spec)
    snap = wait_done(runtime, spec.attempt_uid)
    assert snap.state is TaskState.SUCCEEDED
    lines = runtime.read_logs(spec.attempt_uid).lines
    assert ("stdout", "hello from a callable, iris") in [(line.stream, line.line) for line in lines]


def test_callable_exception_fails_with_traceback(runtime: SubprocessRuntime) -> None:
    spec = make_spec(entrypoint=Entrypoint.from_callable(int, "boom in the task"))
    runtime.start(spec)
    snap = wait_done(runtime, spec.attempt_uid)
    assert snap.state is TaskState.FAILED and snap.exit_code == 1
    stderr = [line.line for line in runtime.read_logs(spec.attempt_uid).lines if line.stream == "stderr"]
    assert "ValueError: invalid literal for int() with base 10: 'boom in the task'" in stderr
    assert stderr[0].startswith("Traceback")


def test_starting_the_same_attempt_twice_runs_it_once(runtime: SubprocessRuntime) -> None:
    spec = make_spec("sleep", "30")
    first = runtime.start(spec)
    second = runtime.start(spec)
    assert first.state is second.state is TaskState.RUNNING and runtime.running_count() == 1
    runtime.kill(spec.attempt_uid, KillReason.STOP)
    wait_done(runtime, spec.attempt_uid)


def test_leftover_trees_are_killed_when_the_worker_restarts(tmp_path: Path) -> None:
    state = tmp_path / "state"
    script = (
        "import sys\nfrom pathlib import Path\n"
        "from iris.cluster.runtime import SubprocessRuntime\n"
        "from iris.rpc.models import Entrypoint, ResourceSpec, RunSpec\n"
        "rt = SubprocessRuntime(Path(sys.argv[1]), worker_id=sys.argv[2], controller_url='http://x')\n"
        "spec = RunSpec(attempt_uid='left1', attempt_number=0, job_id='/a/j', task_id='/a/j/0', task_index=0,\n"
        "    entrypoint=Entrypoint.from_command('sh', '-c', 'sleep 100 & sleep 100'), resources=ResourceSpec())\n"
        "print(rt.start(spec).state, flush=True)\n"
        "sys.stdin.read()\n"
    )
    worker = subprocess.Popen(
        [sys.executable, "-c", script, str(state), TEST_WORKER_ID],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert worker.stdout.readline().strip() == "RUNNING"
    pgid = recorded_pgids(state / "pids")["left1"]
    wait_until(lambda: len([p for p in psutil.process_iter() if _pgid(p.pid) == pgid]) >= 3)
    tree = [p.pid for p in psutil.process_iter() if _pgid(p.pid) == pgid]
    worker.kill()  # like kill -9: no cleanup, the attempt tree keeps running
    worker.wait()
    assert all(pid_alive(pid) for pid in tree)

    restarted = SubprocessRuntime(state, worker_id=TEST_WORKER_ID, controller_url="http://x")
    try:
        assert restarted.leftovers_killed == ["left1"]
        wait_until(lambda: not any(pid_alive(pid) for pid in tree), timeout=5)
        assert recorded_pgids(state / "pids") == {}
        # The previous run's log stays readable, as a finished log.
        page = restarted.read_logs("left1")
        assert page.complete and "started process" in page.lines[0].line
    finally:
        restarted.shutdown()


@pytest.mark.parametrize("recorded_in", ["journal", "an older version's record file"])
def test_leftover_record_with_a_reused_pid_kills_nothing(tmp_path: Path, recorded_in: str) -> None:
    state = tmp_path / "state"
    (state / "pids").mkdir(parents=True)
    bystander = subprocess.Popen(["sleep", "30"], start_new_session=True)
    try:
        if recorded_in == "journal":
            (state / "pids" / "journal").write_text(f"+ old {bystander.pid} 1 whatever\n")
        else:
            record = {"attempt_uid": "old", "pgid": bystander.pid, "start_ticks": 1, "boot_id": "whatever"}
            (state / "pids" / "old.json").write_text(json.dumps(record))
        rt = SubprocessRuntime(state, worker_id=TEST_WORKER_ID, controller_url="http://x")
        rt.shutdown()
        assert rt.leftovers_killed == ["old"]
        assert bystander.poll() is None
    finally:
        bystander.kill()
        bystander.wait()


def test_running_attempts_are_lines_of_one_journal_not_files(runtime: SubprocessRuntime) -> None:
    specs = [make_spec("sleep", "30") for _ in range(3)]
    runtime.start_many(specs)
    uids = {s.attempt_uid for s in specs}
    wait_until(lambda: set(recorded_pgids(runtime.pids_dir)) == uids)
    assert os.listdir(runtime.pids_dir) == ["journal"]
    live = {uid: (pid, pgid) for uid, pid, pgid in runtime.live_processes()}
    assert set(live) == uids
    assert all(pid == pgid == recorded_pgids(runtime.pids_dir)[uid] for uid, (pid, pgid) in live.items())
    first = specs[0].attempt_uid
    runtime.kill(first, KillReason.STOP)
    wait_done(runtime, first)
    assert set(recorded_pgids(runtime.pids_dir)) == uids - {first}
    assert {uid for uid, _, _ in runtime.live_processes()} == uids - {first}
    for spec in specs[1:]:
        runtime.kill(spec.attempt_uid, KillReason.STOP)
        wait_done(runtime, spec.attempt_uid)
    assert recorded_pgids(runtime.pids_dir) == {} and runtime.live_processes() == []


def test_shutdown_kills_running_attempts(tmp_path: Path) -> None:
    rt = SubprocessRuntime(
        tmp_path / "s", worker_id=TEST_WORKER_ID, controller_url="http://x", kill_grace_s=0.5
    )
    spec = make_spec("sleep", "60")
    rt.start(spec)
    rt.shutdown()
    snap = rt.snapshot(spec.attempt_uid)
    assert snap.state is TaskState.KILLED and snap.runtime_released


def test_state_changes_are_reported_through_the_callback(tmp_path: Path) -> None:
    changes: list[str] = []
    rt = SubprocessRuntime(
        tmp_path / "s", worker_id=TEST_WORKER_ID, controller_url="http://x", on_change=changes.append
    )
    try:
        spec = make_spec("true")
        rt.start(spec)
        wait_done(rt, spec.attempt_uid)
        wait_until(lambda: changes.count(spec.attempt_uid) >= 2)  # started, then finished (and released)
    finally:
        rt.shutdown()


def test_retention_keeps_only_the_newest_finished_attempts(tmp_path: Path) -> None:
    rt = SubprocessRuntime(
        tmp_path / "s",
        worker_id=TEST_WORKER_ID,
        controller_url="http://x",
        keep_finished=3,
        monitor_interval_s=0.05,
    )
    try:
        specs = [make_spec("true") for _ in range(6)]
        for spec in specs:
            rt.start(spec)
            wait_done(rt, spec.attempt_uid)
        # Retention removes an attempt's log, then its work dir: wait for both.
        wait_until(lambda: len(os.listdir(rt.attempts_dir)) == 3 and len(os.listdir(rt.tasks_dir)) == 3)
        kept = sorted(s.attempt_uid for s in specs[3:])
        assert sorted(p.name for p in rt.attempts_dir.iterdir()) == [f"{uid}.jsonl" for uid in kept]
        assert sorted(p.name for p in rt.tasks_dir.iterdir()) == kept
        assert rt.snapshot(specs[0].attempt_uid) is None
        assert rt.read_logs(specs[-1].attempt_uid).complete
    finally:
        rt.shutdown()


def _pgid(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except ProcessLookupError:
        return None


def test_escapee_holding_the_output_pipe_is_found_and_killed(
    runtime: SubprocessRuntime, tmp_path: Path
) -> None:
    pidfile = tmp_path / "holder.pid"
    # The main process exits at once; a setsid'd child that left the tree keeps stdout open.
    script = (
        f"setsid sh -c 'echo $$ > {pidfile}.tmp; mv {pidfile}.tmp {pidfile}; exec sleep 100' & "
        f"while [ ! -s {pidfile} ]; do sleep 0.01; done; echo bye"
    )
    spec = make_spec("sh", "-c", script)
    runtime.start(spec)
    wait_until(lambda: pidfile.exists() and pidfile.read_text().strip().isdigit())
    holder = int(pidfile.read_text())
    snap = wait_done(runtime, spec.attempt_uid)
    assert snap.state is TaskState.SUCCEEDED
    assert ("stdout", "bye") in [
        (line.stream, line.line) for line in runtime.read_logs(spec.attempt_uid).lines
    ]
    wait_until(lambda: not pid_alive(holder), timeout=5)


def test_a_batch_start_reads_as_building_until_running(runtime: SubprocessRuntime) -> None:
    specs = [make_spec("sleep", "30") for _ in range(12)]
    runtime.start_many(specs, wait_s=0)
    states = {runtime.snapshot(s.attempt_uid).state for s in specs}
    assert states <= {TaskState.BUILDING, TaskState.RUNNING}
    assert runtime.wait_for(
        lambda: all(runtime.snapshot(s.attempt_uid).state is TaskState.RUNNING for s in specs), 15
    )
    assert all(runtime.snapshot(s.attempt_uid).started_at is not None for s in specs)


def test_a_batch_start_returns_once_every_attempt_is_running(runtime: SubprocessRuntime) -> None:
    specs = [make_spec("sleep", "30") for _ in range(12)]
    runtime.start_many(specs, wait_s=30)
    assert {runtime.snapshot(s.attempt_uid).state for s in specs} == {TaskState.RUNNING}


def test_one_start_that_raises_does_not_strand_the_rest_of_its_batch(
    runtime: SubprocessRuntime, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    specs = [make_spec("sleep", "30") for _ in range(6)]
    start = runtime._start_admitted

    def flaky_start(attempt) -> None:
        if attempt.uid == specs[0].attempt_uid:
            raise RuntimeError("cannot start a thread")
        start(attempt)

    monkeypatch.setattr(runtime, "_start_admitted", flaky_start)
    began = time.monotonic()
    runtime.start_many(specs, wait_s=60)
    # The batch counts the failed start as done: the wait ends with the last start, not at wait_s.
    assert time.monotonic() - began < 30
    assert [runtime.snapshot(s.attempt_uid).state for s in specs[1:]] == [TaskState.RUNNING] * 5
    assert f"starting attempt {specs[0].attempt_uid} failed" in caplog.text


def test_an_attempt_makes_one_directory_and_one_file(runtime: SubprocessRuntime) -> None:
    spec = make_spec("sh", "-c", "pwd")
    runtime.start(spec)
    wait_done(runtime, spec.attempt_uid)
    uid = spec.attempt_uid
    assert os.listdir(runtime.attempts_dir) == [f"{uid}.jsonl"]
    assert os.listdir(runtime.tasks_dir) == [uid] and os.listdir(runtime.tasks_dir / uid) == []
    assert os.listdir(runtime.pids_dir) == ["journal"]
    stdout = [line.line for line in runtime.read_logs(uid).lines if line.stream == "stdout"]
    assert stdout == [str(runtime.tasks_dir / uid)]


def test_a_redispatched_attempt_starts_a_fresh_log_and_work_dir(tmp_path: Path) -> None:
    script = "if [ -e left-behind ]; then echo stale; fi; echo run >> ../../marker; wc -l < ../../marker; touch left-behind"
    spec = make_spec("sh", "-c", script)
    for expected in ("1", "2"):  # the same attempt, run again by a restarted worker
        rt = new_runtime(tmp_path)
        try:
            rt.start(spec)
            wait_done(rt, spec.attempt_uid)
            lines = rt.read_logs(spec.attempt_uid).lines
            assert [line.line for line in lines if line.stream == "stdout"] == [expected]
            assert sum("started process" in line.line for line in lines) == 1
            assert os.listdir(rt.tasks_dir / spec.attempt_uid) == ["left-behind"]
        finally:
            rt.shutdown()


def test_an_older_versions_attempt_dirs_are_moved_to_this_layout(tmp_path: Path) -> None:
    state = tmp_path / "state"
    old = state / "attempts" / "old1"
    (old / "work").mkdir(parents=True)
    (old / "work" / "output.txt").write_text("kept")
    (old / "log.jsonl.1").write_bytes(encode_line(1.0, "stdout", "first"))
    (old / "log.jsonl").write_bytes(encode_line(2.0, "stdout", "second"))
    (state / "attempts" / "old2").mkdir()  # as under per-task uids: its work dir was elsewhere
    (state / "attempts" / "old2" / "log.jsonl").write_bytes(encode_line(3.0, "stdout", "third"))
    rt = SubprocessRuntime(
        state, worker_id=TEST_WORKER_ID, controller_url="http://x", keep_finished=1, monitor_interval_s=0.05
    )
    try:
        assert not old.exists() and not (state / "attempts" / "old2").exists()
        assert [line.line for line in rt.read_logs("old2").lines] == ["third"]
        assert (rt.tasks_dir / "old1" / "output.txt").read_text() == "kept"
        page = rt.read_logs("old1")
        assert page.complete and [line.line for line in page.lines] == ["second"]
        assert b'"first"' in (rt.attempts_dir / "old1.jsonl.1").read_bytes()  # its rotated file, beside it
        spec = make_spec("true")
        rt.start(spec)
        wait_done(rt, spec.attempt_uid)
        # Retention drops the old attempts like any other: their log files and work dirs.
        wait_until(lambda: sorted(os.listdir(rt.attempts_dir)) == [f"{spec.attempt_uid}.jsonl"])
        assert os.listdir(rt.tasks_dir) == [spec.attempt_uid]
    finally:
        rt.shutdown()


def test_an_attempts_stdin_is_dev_null(runtime: SubprocessRuntime) -> None:
    specs = [make_spec("sh", "-c", "readlink /proc/self/fd/0; cat; echo read-to-end") for _ in range(2)]
    for spec in specs:
        runtime.start(spec)
    for spec in specs:
        assert wait_done(runtime, spec.attempt_uid).state is TaskState.SUCCEEDED
        lines = [line.line for line in runtime.read_logs(spec.attempt_uid).lines if line.stream == "stdout"]
        assert lines == ["/dev/null", "read-to-end"]


def test_changes_since_a_mark_name_the_attempts_whose_log_was_made_or_that_ended(tmp_path: Path) -> None:
    rt = new_runtime(tmp_path)
    try:
        done, running = make_spec("true"), make_spec("sleep", "60")
        rt.start(done)
        wait_done(rt, done.attempt_uid)
        mark, everything = rt.attempts_changed_since(0)
        assert everything == {done.attempt_uid: True}
        assert rt.attempts_changed_since(mark) == (mark, {})
        waiting = rt._admit(running)  # admitted, waiting for a starter thread: no log yet
        assert waiting is not None and rt.attempts_changed_since(mark) == (mark, {})
        rt._start_admitted(waiting)
        mark2, changed = rt.attempts_changed_since(mark)
        assert changed == {running.attempt_uid: False} and mark2 > mark
        rt.record_failure("refused", "no such thing")
        rt.kill(running.attempt_uid, KillReason.STOP)
        wait_done(rt, running.attempt_uid)
        _, changed = rt.attempts_changed_since(mark2)
        assert changed == {running.attempt_uid: True, "refused": True}
        # Mark 0 still answers every attempt known, as terminal_by_uid does.
        assert rt.attempts_changed_since(0)[1] == rt.terminal_by_uid()
    finally:
        rt.shutdown()


def test_a_mark_older_than_what_is_remembered_gets_every_attempt(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(subprocess_runtime, "_CHANGES_KEPT", 2)
    rt = new_runtime(tmp_path)
    try:
        mark, _ = rt.attempts_changed_since(0)
        for k in range(4):
            rt.record_failure(f"refused{k}", "no")
        # Two of the four changes after ``mark`` are forgotten: the answer is everything known.
        assert rt.attempts_changed_since(mark)[1] == {f"refused{k}": True for k in range(4)}
        mark, _ = rt.attempts_changed_since(0)
        rt.record_failure("refused4", "no")
        assert rt.attempts_changed_since(mark)[1] == {"refused4": True}
    finally:
        rt.shutdown()


def test_terminal_of_answers_the_asked_attempts_and_every_live_one(runtime: SubprocessRuntime) -> None:
    ended, asked_live, unasked_live = make_spec("true"), make_spec("sleep", "60"), make_spec("sleep", "60")
    runtime.start(ended)
    wait_done(runtime, ended.attempt_uid)
    runtime.record_failure("unasked-ended", "no")
    runtime.start(asked_live)
    runtime.start(unasked_live)
    known = runtime.terminal_of([ended.attempt_uid, asked_live.attempt_uid, "never-seen"])
    assert known == {ended.attempt_uid: True, asked_live.attempt_uid: False, unasked_live.attempt_uid: False}
    assert runtime.state_of(ended.attempt_uid) == (TaskState.SUCCEEDED, True)
    assert runtime.state_of("unasked-ended") == (TaskState.FAILED, False)
    assert runtime.state_of("never-seen") is None


def test_a_finished_attempts_small_log_is_handed_over_once(runtime: SubprocessRuntime) -> None:
    spec = make_spec("sh", "-c", "echo out; echo err >&2")
    runtime.start(spec)
    wait_done(runtime, spec.attempt_uid)
    whole = runtime.take_finished_log(spec.attempt_uid)
    assert whole == (runtime.attempts_dir / f"{spec.attempt_uid}.jsonl").read_bytes()
    assert b'"line":"out"' in whole and whole.endswith(b"\n")
    assert runtime.take_finished_log(spec.attempt_uid) is None
