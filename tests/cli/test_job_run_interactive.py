"""`iris job run` as a person uses it: id and link first, a live status on a terminal, Ctrl-C."""

from __future__ import annotations

import os
import re
import signal
import subprocess
from pathlib import Path

from tests.cli.helpers import IRIS, LineReader, iris_env, run_iris
from tests.conftest import wait_until

from iris.client import IrisClient, JobState
from iris.client.local_cluster import LocalCluster

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def test_job_id_and_dashboard_link_come_first(cluster: LocalCluster, workdir: Path) -> None:
    result = run_iris(cluster, workdir, "job", "run", "--", "sh", "-c", "echo out; echo err >&2")
    assert result.returncode == 0, result.stderr
    assert result.stdout == "out\n"
    lines = [line for line in result.stderr.splitlines() if not line.startswith("workspace ")]
    job_id = lines[0].removeprefix("job ")
    assert re.fullmatch(r"/[\w.-]+/sh-[\w-]+", job_id), lines
    assert lines[1] == f"dashboard: {cluster.url}/#/jobs{job_id}"
    assert lines[2] == "err"
    assert not ANSI.search(result.stderr)  # not a terminal: no live status, no escape codes


def _start_run(
    cluster: LocalCluster, cwd: Path, *command: str
) -> tuple[subprocess.Popen[str], LineReader, str]:
    proc = subprocess.Popen(
        [*IRIS, "job", "run", "--", *command],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
        cwd=cwd,
        env=iris_env(cluster),
    )
    assert proc.stderr is not None
    reader = LineReader(proc.stderr)
    job_id = reader.wait_for("job /").split()[1]
    reader.wait_for("dashboard: ")  # printed after submitting: the follow loop is next
    return proc, reader, job_id


def _wait_running(client: IrisClient, job_id: str) -> None:
    wait_until(lambda: client.job(job_id).status() is JobState.RUNNING, what=f"{job_id} RUNNING")


def test_ctrl_c_stops_the_job(cluster: LocalCluster, client: IrisClient, workdir: Path) -> None:
    proc, reader, job_id = _start_run(cluster, workdir, "sleep", "60")
    try:
        _wait_running(client, job_id)
        proc.send_signal(signal.SIGINT)
        reader.wait_for("press Ctrl-C again to detach")
        assert proc.wait(timeout=30) == 130
    finally:
        if proc.poll() is None:
            proc.kill()
    assert reader.wait_for(f"job {job_id} KILLED")
    detail = client.job(job_id).detail()
    assert detail.state is JobState.KILLED
    # The task's process is really gone: the worker confirmed the attempt released.
    wait_until(
        lambda: all(a.finished_at for t in client.job(job_id).tasks() for a in t.attempts),
        what="the attempt to finish on the worker",
    )


def test_second_ctrl_c_detaches_and_the_job_keeps_running(
    cluster: LocalCluster, client: IrisClient, workdir: Path
) -> None:
    proc, reader, job_id = _start_run(cluster, workdir, "sleep", "60")
    try:
        _wait_running(client, job_id)
        proc.send_signal(signal.SIGINT)
        reader.wait_for("press Ctrl-C again to detach")
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=30) == 130
        assert reader.wait_for("detached: job")
        assert f"iris job stop {job_id}" in reader.rest()[-1]
        # The CLI is gone and nothing else stops jobs: the job is still running.
        assert client.job(job_id).status() is JobState.RUNNING
        assert [t.state for t in client.job(job_id).tasks()] == ["RUNNING"]
    finally:
        if proc.poll() is None:
            proc.kill()
        client.job(job_id).kill()


def test_live_status_on_a_terminal(cluster: LocalCluster, workdir: Path) -> None:
    """With stderr on a terminal a status line shows task counts and why tasks wait."""
    master, slave = os.openpty()
    proc = subprocess.Popen(
        # More CPU than the cluster has: the job waits with a reason, then gives up.
        [
            *IRIS,
            "job",
            "run",
            "--cpu",
            "64",
            "--scheduling-timeout",
            "2",
            "--wait-for-capacity",
            "--",
            "true",
        ],
        stdout=subprocess.PIPE,
        stderr=slave,
        stdin=subprocess.DEVNULL,
        cwd=workdir,
        env=iris_env(cluster, TERM="xterm-256color"),
    )
    os.close(slave)
    screen = b""
    while True:
        try:
            chunk = os.read(master, 4096)
        except OSError:  # EIO: the process closed the terminal
            break
        if not chunk:
            break
        screen += chunk
    os.close(master)
    assert proc.wait(timeout=30) == 1
    text = ANSI.sub("", screen.decode(errors="replace"))
    assert "pending  ·  1 pending" in text
    assert "pending: " in text and "cpu" in text.lower()
    assert "UNSCHEDULABLE" in text
    assert ANSI.search(screen.decode(errors="replace"))  # the status is redrawn in place
