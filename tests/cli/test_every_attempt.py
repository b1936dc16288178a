"""``iris job run`` and ``iris job logs -f`` stream every attempt in order, a line announcing each
retry; a ``--replace`` run shows only its own output; Ctrl-C while following exits 130."""

from __future__ import annotations

import signal
import subprocess
from pathlib import Path

from tests.cli.helpers import IRIS, LineReader, iris_env, run_iris

from iris.client.local_cluster import LocalCluster

# docs/tutorial.md §7: fails until its third attempt.
FLAKY = 'echo "attempt $IRIS_ATTEMPT_NUMBER"; test "$IRIS_ATTEMPT_NUMBER" = 2'
RETRIES = [
    "--- task 0: attempt 0 failed (exit 1, will retry: 1 of 2 left); attempt 1 starting on worker-0 ---",
    "--- task 0: attempt 1 failed (exit 1, will retry: 0 of 2 left); attempt 2 starting on worker-0 ---",
]


def test_run_and_logs_f_show_every_attempt_with_the_retries_announced(
    cluster: LocalCluster, workdir: Path
) -> None:
    run = run_iris(
        cluster, workdir, "job", "run", "--name", "flaky", "--max-retries", "2", "--", "sh", "-c", FLAKY
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout == "attempt 0\nattempt 1\nattempt 2\n"
    assert [line for line in run.stderr.splitlines() if line.startswith("---")] == RETRIES
    logs = run_iris(cluster, workdir, "job", "logs", "-f", "flaky")
    assert logs.returncode == 0, logs.stderr
    assert logs.stdout == "attempt 0\nattempt 1\nattempt 2\n"
    assert logs.stderr.splitlines() == RETRIES
    # Without -f: the current attempt, as before.
    assert run_iris(cluster, workdir, "job", "logs", "flaky").stdout == "attempt 2\n"


def test_replicas_keep_their_prefix_and_each_task_its_own_retries(
    cluster: LocalCluster, workdir: Path
) -> None:
    script = 'echo "try $IRIS_ATTEMPT_NUMBER"; test "$IRIS_TASK_INDEX" = 0 || test "$IRIS_ATTEMPT_NUMBER" = 1'
    run = run_iris(
        cluster,
        workdir,
        "job",
        "run",
        "--replicas",
        "2",
        "--cpu",
        "0.25",
        "--max-retries",
        "1",
        "--",
        "sh",
        "-c",
        script,
    )
    assert run.returncode == 0, run.stderr
    assert sorted(run.stdout.splitlines()) == ["[task 0] try 0", "[task 1] try 0", "[task 1] try 1"]
    notes = [line for line in run.stderr.splitlines() if line.startswith("---")]
    assert len(notes) == 1 and notes[0].startswith(
        "--- task 1: attempt 0 failed (exit 1, will retry: 0 of 1 left); attempt 1 starting on worker-"
    ), run.stderr


def test_a_replace_run_shows_only_its_own_output(cluster: LocalCluster, workdir: Path) -> None:
    old = run_iris(cluster, workdir, "job", "run", "--name", "rep", "--", "sh", "-c", "echo old run; exit 3")
    assert old.returncode == 3 and old.stdout == "old run\n"
    new = run_iris(
        cluster,
        workdir,
        "job",
        "run",
        "--name",
        "rep",
        "--replace",
        "--",
        "sh",
        "-c",
        "sleep 0.5; echo new run",
    )
    assert new.returncode == 0, new.stderr
    assert new.stdout == "new run\n"
    assert run_iris(cluster, workdir, "job", "logs", "rep", "--attempt", "all").stdout == "new run\n"


def test_ctrl_c_while_following_logs_exits_130(cluster: LocalCluster, workdir: Path) -> None:
    job = run_iris(
        cluster, workdir, "job", "run", "--no-wait", "--name", "ticker", "--",
        "sh", "-c", "while true; do echo tick; sleep 0.2; done",
    )  # fmt: skip
    assert job.returncode == 0, job.stderr
    proc = subprocess.Popen(
        [*IRIS, "job", "logs", "-f", "ticker"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        stdin=subprocess.DEVNULL,
        text=True,
        cwd=workdir,
        env=iris_env(cluster),
    )
    try:
        assert proc.stdout is not None
        LineReader(proc.stdout).wait_for("tick")
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=30) == 130
    finally:
        if proc.poll() is None:
            proc.kill()
        run_iris(cluster, workdir, "job", "stop", "ticker")


def test_wide_listing_cuts_free_text_never_ids_or_states(cluster: LocalCluster, workdir: Path) -> None:
    name = "a-job-name-long-enough-to-need-its-column"
    reason = "ValueError: " + "a reason that goes on " * 6
    run = run_iris(
        cluster, workdir, "job", "run", "--name", name, "--", "sh", "-c", f"echo '{reason}' >&2; exit 2"
    )
    assert run.returncode == 2, run.stderr
    listing = subprocess.run(
        [*IRIS, "job", "list", "-o", "wide", "--name", name],
        capture_output=True,
        text=True,
        cwd=workdir,
        env=iris_env(cluster, COLUMNS="110"),
        timeout=60,
    )
    assert listing.returncode == 0, listing.stderr
    row = next(line for line in listing.stdout.splitlines() if name in line)
    assert f"/{name}  FAILED  " in row and len(row.rstrip()) <= 110, listing.stdout
    assert "…" in row, "the free-text columns (reason, command) give way"
