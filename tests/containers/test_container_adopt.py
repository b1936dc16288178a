"""A worker daemon killed with ``kill -9`` while container tasks run, and started again with its id
and state dir, adopts its running containers: the engine kept them (and their output) while the
daemon was gone. A container the controller still wants finishes as if nothing happened, its
output in the log once; one it no longer wants is killed and removed. Against the real engine
(the ``container_engine`` session fixture)."""

from __future__ import annotations

import json
import os
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.cli.helpers import run_iris
from tests.conftest import wait_until

from iris.client import IrisClient
from iris.client.local_cluster import LocalCluster
from iris.rpc.errors import IrisError
from iris.testing import container_engine as engines
from iris.testing.images import BUSYBOX_IMAGE

pytestmark = pytest.mark.skipif(not engines.available(), reason="dockerd is not installed")

# Numbered lines on both streams until the file ``go`` appears in its working dir.
TICKER = "i=0; while [ ! -e go ]; do i=$((i+1)); echo tick$i; echo err$i >&2; sleep 0.05; done; echo done-$i"


@pytest.fixture(scope="module")
def cluster(container_engine: engines.Engine) -> Iterator[LocalCluster]:
    # A long grace (fence at 45 s): the restart on a loaded machine must come before the fence.
    with LocalCluster(workers=1, worker_cpu="4", worker_memory="4GB", worker_grace_s=60.0) as lc:
        yield lc


@pytest.fixture
def client(cluster: LocalCluster) -> Iterator[IrisClient]:
    with IrisClient(cluster.url) as c:
        yield c


def _containers(job_id: str) -> list[str]:
    """Names of the job's containers, in any state (other clusters' workers may share ids)."""
    listed = subprocess.run(
        [engines.docker_cli(), "ps", "-a", "--filter", f"label=iris.job={job_id}", "--format", "{{.Names}}"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    return listed.stdout.split()


def _running(name: str) -> bool:
    state = subprocess.run(
        [engines.docker_cli(), "inspect", "--format", "{{.State.Running}}", name],
        capture_output=True,
        text=True,
        timeout=60,
    )
    return state.stdout.strip() == "true"


def _launchers(name: str) -> list[int]:
    """Pids of processes whose command line names the container (its ``docker run`` CLI)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            argv = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"run" in argv and name.encode() in argv:
            found.append(int(entry))
    return found


def _start(cluster: LocalCluster, tmp_path: Path, *command: str) -> str:
    result = run_iris(
        cluster, tmp_path, "job", "run", "--no-workspace", "--no-wait", "--json", "--image", BUSYBOX_IMAGE,
        "--max-preemptions", "0", "--max-retries", "0", "--", *command,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)["job_id"]


def _kill_9(cluster: LocalCluster, container: str) -> str:
    """kill -9 the worker daemon; returns its name once its watchdog has killed the launcher."""
    worker = cluster.workers[0]
    worker.proc.kill()
    worker.proc.wait()
    wait_until(lambda: not _launchers(container), timeout=30, what="the dead daemon's docker run CLI killed")
    return worker.name


def test_a_restarted_worker_adopts_its_running_container(
    cluster: LocalCluster, client: IrisClient, tmp_path: Path
) -> None:
    job = client.job(_start(cluster, tmp_path, "sh", "-c", TICKER))
    worker = cluster.workers[0].name
    [container] = wait_until(lambda: _containers(job.job_id), timeout=60, what="the container running")
    wait_until(lambda: "tick3" in job.logs(), timeout=60, what="output logged before the kill")
    _kill_9(cluster, container)
    assert _running(container), "the engine keeps the container while the daemon is gone"
    cluster.restart_worker(worker)
    wait_until(lambda: job.detail().tasks[0].state.value == "RUNNING", timeout=60, what="RUNNING")

    def touch_go() -> bool:
        try:  # the controller learns the restarted daemon's new address when it registers again
            return job.exec(["touch", "go"]).exit_code == 0
        except IrisError:
            return False

    wait_until(touch_go, timeout=60, interval=0.2, what="exec in the adopted container")
    wait_until(lambda: job.detail().state.value == "SUCCEEDED", timeout=60, what="the job SUCCEEDED")
    task = job.detail().tasks[0]
    assert task.exit_code == 0 and task.attempt_count == 1, task
    # The log shipper sends the last lines after the end.
    lines = wait_until(
        lambda: (got := job.logs()) and any(line.startswith("done-") for line in got) and got,
        timeout=60,
        what="the whole output in the job's log",
    )
    ticks = [int(m.group(1)) for line in lines if (m := re.fullmatch(r"tick(\d+)", line))]
    errs = [int(m.group(1)) for line in lines if (m := re.fullmatch(r"err(\d+)", line))]
    [done] = [line for line in lines if line.startswith("done-")]
    last = int(done.removeprefix("done-"))
    # Every line once: none lost while the daemon was gone, none logged again after the restart.
    assert ticks == list(range(1, last + 1)), lines
    assert errs == list(range(1, last + 1)), lines
    wait_until(lambda: _containers(job.job_id) == [], timeout=60, what="no container left")


def test_a_container_the_controller_no_longer_wants_is_removed_after_restart(
    cluster: LocalCluster, client: IrisClient, tmp_path: Path
) -> None:
    job = client.job(_start(cluster, tmp_path, "sleep", "600"))
    worker = cluster.workers[0].name
    [container] = wait_until(lambda: _containers(job.job_id), timeout=60, what="the container running")
    wait_until(lambda: job.detail().tasks[0].state.value == "RUNNING", timeout=60, what="RUNNING")
    _kill_9(cluster, container)
    job.kill()  # while the daemon is gone: the controller now wants the attempt stopped
    assert _running(container)
    cluster.restart_worker(worker)
    wait_until(lambda: _containers(job.job_id) == [], timeout=60, what="the unwanted container removed")
    wait_until(lambda: job.detail().state.value == "KILLED", timeout=60, what="the job KILLED")
