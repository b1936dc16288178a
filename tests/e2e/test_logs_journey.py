"""Logs, usage and failures outlive the machine: a real local cluster whose worker is killed after
its task failed; the CLI still prints the tail, the failure kind and the peak memory."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from tests.conftest import free_port, wait_until

from iris.client import Entrypoint, IrisClient, JobState, LocalCluster, ResourceSpec
from iris.rpc.errors import IrisError

IRIS = [sys.executable, "-m", "iris.cli.main"]

CHATTY_THEN_FAIL = (
    "import sys, time\n"
    "blob = b'x' * (40 * 1024 * 1024)\n"  # some memory to see as the peak...
    "time.sleep(1.5)\n"  # ...held for a few usage samples
    "for i in range(10000):\n"
    "    print(f'line {i}')\n"
    "print('bad things happened', file=sys.stderr)\n"
    "sys.exit(1)\n"
)


@pytest.fixture
def cluster(tmp_path: Path):
    with LocalCluster(workers=1, state_dir=tmp_path, worker_grace_s=2.0, tick_s=0.5) as lc:
        yield lc


def iris(cluster: LocalCluster, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "IRIS_CONTROLLER_URL": cluster.url}
    return subprocess.run([*IRIS, *args], capture_output=True, text=True, env=env, timeout=60)


def test_logs_status_and_summary_after_the_worker_is_killed(cluster: LocalCluster) -> None:
    client = IrisClient.remote(cluster.url)
    job = client.submit(
        name="chatty",
        entrypoint=Entrypoint.from_command(sys.executable, "-c", CHATTY_THEN_FAIL),
        resources=ResourceSpec(cpu=0.5, memory="512MB"),
    )
    detail = job.wait(timeout=60)
    assert detail.state is JobState.FAILED
    # Every line reached the controller (the worker ships them as they are written).
    wait_until(
        lambda: (
            job.query_logs(tail=1).lines[-1:]
            and job.query_logs(tail=1).lines[-1].line == "bad things happened"
        ),
        timeout=20,
        what="the last line in the controller's store",
    )
    wait_until(lambda: job.summary().tasks[0].peak_rss_bytes, timeout=20, what="usage reported")

    os.kill(cluster.workers[0].proc.pid, signal.SIGKILL)
    cluster.workers[0].proc.wait()
    wait_until(lambda: not client.workers().workers, timeout=30, what="the dead worker reaped")

    logs = iris(cluster, "job", "logs", job.job_id, "--tail", "5")
    assert logs.returncode == 0, logs.stderr
    assert logs.stdout.splitlines() == [f"line {i}" for i in range(9996, 10000)]
    assert logs.stderr.splitlines() == ["bad things happened"]

    status = iris(cluster, "job", "status", job.job_id)
    assert status.returncode == 0, status.stderr
    assert "task 0 failed (exit code): exited with code 1" in status.stdout
    assert "last 20 log lines:" in status.stdout
    assert "    line 9999" in status.stdout and "    bad things happened" in status.stdout

    summary = iris(cluster, "job", "summary", job.job_id, "--json")
    assert summary.returncode == 0, summary.stderr
    task = json.loads(summary.stdout)["tasks"][0]
    assert task["state"] == "FAILED" and task["exit_code"] == 1 and task["attempts"] == 1
    assert task["peak_rss_bytes"] > 40 * 1024 * 1024
    assert task["memory_limit_bytes"] == 512 * 1000**2
    assert task["worker_id"] == "worker-0"
    table = iris(cluster, "job", "summary", job.job_id)
    assert "PEAK MEM / LIMIT" in table.stdout and "worker-0" in table.stdout

    waited = iris(cluster, "job", "wait", job.job_id)
    assert waited.returncode == 1


def test_follow_prints_at_once_and_grep_since_filter_on_the_server(cluster: LocalCluster) -> None:
    client = IrisClient.remote(cluster.url)
    script = (
        "import time\n"
        "for i in range(5):\n"
        "    print(f'tick {i}', flush=True)\n"
        "    time.sleep(0.3)\n"
        "print('\\x1b[31mred done\\x1b[0m')\n"
    )
    job = client.submit(
        name="ticker",
        entrypoint=Entrypoint.from_command(sys.executable, "-c", script),
        resources=ResourceSpec(cpu=0.5, memory="256MB"),
    )
    env = {**os.environ, "IRIS_CONTROLLER_URL": cluster.url}
    follow = subprocess.Popen(
        [*IRIS, "job", "logs", "-f", "--no-color", job.job_id], stdout=subprocess.PIPE, text=True, env=env
    )
    first = follow.stdout.readline() if follow.stdout else ""
    assert first == "tick 0\n"  # printed while the task still runs
    rest = follow.stdout.read() if follow.stdout else ""
    assert follow.wait(timeout=60) == 0
    assert rest.splitlines() == ["tick 1", "tick 2", "tick 3", "tick 4", "red done"]  # colours stripped

    grep = iris(cluster, "job", "logs", job.job_id, "--grep", "tick [13]")
    assert grep.stdout.splitlines() == ["tick 1", "tick 3"]
    stamped = iris(cluster, "job", "logs", job.job_id, "--tail", "1", "--timestamps")
    assert stamped.stdout.endswith("Z \x1b[31mred done\x1b[0m\n")
    bad = iris(cluster, "job", "logs", job.job_id, "--grep", "(")
    assert bad.returncode != 0 and "not a valid regular expression" in bad.stderr


def _spawn(argv: list[str], log: Path) -> subprocess.Popen[bytes]:
    out = log.open("ab")
    return subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)


def test_nothing_is_lost_when_the_controller_is_killed_mid_log(tmp_path: Path) -> None:
    """kill -9 of the controller while a task prints: the worker resends what was not acknowledged."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    controller_argv = [
        *IRIS,
        "controller",
        "start",
        "--port",
        str(port),
        "--state-dir",
        str(tmp_path / "c"),
        "--tick",
        "0.5",
    ]
    controller = _spawn(controller_argv, tmp_path / "controller.log")
    worker = _spawn(
        [*IRIS, "worker", "start", "--controller", url, "--worker-id", "w0", "--cpu", "2", "--memory", "2GB",
         "--state-dir", str(tmp_path / "w0"), "--reregister-after", "1"],
        tmp_path / "w0.log",
    )  # fmt: skip
    marker = tmp_path / "go"
    client = IrisClient(url)
    script = (
        "import os, time\n"
        "i = 0\n"
        f"while not os.path.exists({str(marker)!r}) or i < 300:\n"
        "    print(f'n {i}', flush=True)\n"
        "    i += 1\n"
        "    time.sleep(0.01)\n"
    )
    try:
        wait_until(lambda: _workers(client) == 1, timeout=60, what="the worker registered")
        job = client.submit(
            name="printer",
            entrypoint=Entrypoint.from_command(sys.executable, "-c", script),
            resources=ResourceSpec(cpu=0.5, memory="128MB"),
        )
        wait_until(lambda: job.query_logs(tail=1).lines, timeout=60, what="first lines stored")
        controller.send_signal(signal.SIGKILL)
        controller.wait(timeout=30)
        controller = _spawn(controller_argv, tmp_path / "controller.log")
        wait_until(lambda: _workers(client) == 1, timeout=60, what="the worker back with the new controller")
        marker.touch()
        assert job.wait(timeout=120).state is JobState.SUCCEEDED
        lines = [line.line for line in job.iter_logs(follow=True)]
        assert lines == [f"n {i}" for i in range(len(lines))] and len(lines) >= 300
    finally:
        client.close()
        for proc in (worker, controller):
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in (worker, controller):
            proc.wait(timeout=30)


def _workers(client: IrisClient) -> int:
    try:
        return len(client.workers().workers)
    except IrisError:
        return -1


def diverge() -> None:
    print("epoch 1")
    raise ValueError("learning rate too high: 5.0")


def test_a_failed_callable_says_its_exception(cluster: LocalCluster) -> None:
    client = IrisClient.remote(cluster.url)
    job = client.submit(
        name="diverge",
        entrypoint=Entrypoint.from_callable(diverge),
        resources=ResourceSpec(cpu=0.5, memory="256MB"),
    )
    assert job.wait(timeout=60).state is JobState.FAILED

    def diagnosed() -> str | None:
        failure = job.detail().tasks[0].failure
        return failure.exception if failure is not None else None

    assert (
        wait_until(diagnosed, timeout=20, what="the exception") == "ValueError: learning rate too high: 5.0"
    )
    failure = job.detail().tasks[0].failure
    assert (
        failure is not None
        and failure.summary == "exited with code 1: ValueError: learning rate too high: 5.0"
    )
    status = iris(cluster, "job", "status", job.job_id)
    assert (
        "task 0 failed (exit code): exited with code 1: ValueError: learning rate too high: 5.0"
        in status.stdout
    )
