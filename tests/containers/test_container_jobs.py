"""Jobs in container images on worker daemons, run as a user runs them (``iris job run --image``)
against a real dockerd (the ``container_engine`` session fixture) and the cached test images."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import httpx
import pytest
from tests.cli.helpers import run_iris
from tests.conftest import wait_until

from iris.client import Entrypoint, IrisClient
from iris.client.local_cluster import LocalCluster
from iris.testing import container_engine as engines
from iris.testing.images import BUSYBOX_IMAGE, PYTHON_IMAGE

pytestmark = pytest.mark.skipif(not engines.available(), reason="dockerd is not installed")


@pytest.fixture(scope="module")
def cluster(container_engine: engines.Engine) -> Iterator[LocalCluster]:
    with LocalCluster(workers=1, worker_cpu="4", worker_memory="4GB") as lc:
        yield lc


@pytest.fixture
def client(cluster: LocalCluster) -> Iterator[IrisClient]:
    with IrisClient(cluster.url) as c:
        yield c


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    d = tmp_path / "work"
    d.mkdir()
    return d


def _managed_containers(client: IrisClient, workers: Sequence[str] = ()) -> list[str]:
    """The containers of the cluster's workers (``workers``: of these)."""
    workers = set(workers) or {w.worker_id for w in client.workers().workers}
    listed = subprocess.run(
        [
            engines.docker_cli(),
            "ps",
            "-a",
            "--filter",
            "label=iris.managed=true",
            "--format",
            '{{.Names}}\t{{.Label "iris.worker"}}',
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    return [line for line in listed.stdout.splitlines() if line.partition("\t")[2] in workers]


def _failure(client: IrisClient, cluster: LocalCluster, workdir: Path, *args: str) -> tuple[dict, float]:
    started = time.monotonic()
    result = run_iris(cluster, workdir, "job", "run", "--no-workspace", "--no-wait", "--json", *args)
    assert result.returncode == 0, result.stderr
    job_id = json.loads(result.stdout)["job_id"]
    job = client.job(job_id)
    wait_until(lambda: job.detail().tasks[0].failure is not None, timeout=90, what="the task's failure")
    elapsed = time.monotonic() - started
    return job.detail().tasks[0].failure.model_dump(), elapsed


def test_job_runs_in_the_image_with_its_workspace_and_exit_code(
    cluster: LocalCluster, client: IrisClient, workdir: Path
) -> None:
    (workdir / "data.txt").write_text("from-the-workspace\n")
    script = (
        "import os, sys, platform;"
        "print(open('data.txt').read().strip(), os.getcwd() == os.environ['PWD'],"
        " os.path.exists('/work'), os.environ['IRIS_TASK_INDEX'], platform.python_version());"
        "sys.exit(7)"
    )
    result = run_iris(cluster, workdir, "job", "run", "--image", PYTHON_IMAGE, "--", "python3", "-c", script)
    assert result.returncode == 7, result.stderr
    words = result.stdout.split("from-the-workspace", 1)[1].split()
    # In the image (Debian bookworm's Python, no /work from the host), in the workspace copy.
    assert words[:3] == ["True", "False", "0"], result.stdout
    assert words[3].startswith("3.11."), result.stdout
    wait_until(lambda: _managed_containers(client) == [], what="no container left")


def test_memory_limit_ends_in_oom_with_the_limit(
    cluster: LocalCluster, client: IrisClient, workdir: Path
) -> None:
    failure, _ = _failure(
        client, cluster, workdir, "--image", BUSYBOX_IMAGE, "--memory", "64MB", "--",
        "sh", "-c", "head -c 300000000 /dev/zero | tail > /dev/null",
    )  # fmt: skip
    assert failure["kind"] == "oom", failure
    assert failure["memory_limit_bytes"] == 64 * 1000**2
    assert failure["peak_rss_bytes"]
    assert "64" in failure["summary"], failure
    wait_until(lambda: _managed_containers(client) == [], what="no container left")


def test_missing_image_fails_fast_with_kind_image(
    cluster: LocalCluster, client: IrisClient, workdir: Path
) -> None:
    failure, elapsed = _failure(
        client, cluster, workdir, "--image", "iris-test/no-such-image:1", "--", "true"
    )
    assert failure["kind"] == "image", failure
    assert "iris-test/no-such-image:1" in failure["summary"]
    assert elapsed < 60
    never, _ = _failure(
        client,
        cluster,
        workdir,
        "--image",
        "iris-test/absent:2",
        "--image-pull-policy",
        "never",
        "--",
        "true",
    )
    assert never["kind"] == "image" and "pull policy is never" in never["summary"], never
    assert _managed_containers(client) == []


def test_a_killed_container_job_leaves_no_container(
    cluster: LocalCluster, client: IrisClient, workdir: Path
) -> None:
    result = run_iris(
        cluster, workdir, "job", "run", "--no-workspace", "--no-wait", "--json", "--image", BUSYBOX_IMAGE,
        "--", "sh", "-c", "trap '' TERM; sleep 600",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    job = client.job(json.loads(result.stdout)["job_id"])
    wait_until(lambda: len(_managed_containers(client)) == 1, timeout=60, what="the container running")
    job.kill()
    wait_until(lambda: job.detail().state.value in ("KILLED", "FAILED"), timeout=60, what="the job killed")
    wait_until(lambda: _managed_containers(client) == [], timeout=30, what="no container left")
    assert os.environ["DOCKER_HOST"].startswith("unix://")


def test_a_worker_killed_with_kill_9_leaves_no_container(
    cluster: LocalCluster, client: IrisClient, workdir: Path
) -> None:
    result = run_iris(
        cluster, workdir, "job", "run", "--no-workspace", "--no-wait", "--json", "--image", BUSYBOX_IMAGE,
        "--max-preemptions", "0", "--", "sleep", "600",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    job = client.job(json.loads(result.stdout)["job_id"])
    [running] = wait_until(lambda: _managed_containers(client), timeout=60, what="the container running")
    worker = cluster.workers[0]
    # kill -9: its watchdog kills the attempt's `docker run` CLI at once; the container runs on
    # (for a restarted daemon to adopt) until the fencing deadline (5 s after the last reconcile
    # here), when the watchdog, seeing no new daemon, removes it
    worker.proc.kill()
    worker.proc.wait()
    wait_until(
        lambda: running not in _managed_containers(client, [worker.name]),
        timeout=60,
        what="the dead worker's container removed",
    )
    cluster.restart_worker(worker.name)
    job.kill()
    wait_until(lambda: _managed_containers(client) == [], timeout=60, what="no container left")


def test_exec_and_status_reach_the_container(
    cluster: LocalCluster, client: IrisClient, workdir: Path
) -> None:
    result = run_iris(
        cluster, workdir, "job", "run", "--no-workspace", "--no-wait", "--json", "--image", BUSYBOX_IMAGE,
        "--", "sleep", "600",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    job = client.job(json.loads(result.stdout)["job_id"])
    wait_until(lambda: len(_managed_containers(client)) == 1, timeout=60, what="the container running")
    wait_until(lambda: job.detail().tasks[0].state.value == "RUNNING", timeout=30, what="RUNNING")
    # The image's /etc/passwd (two lines), not the worker's.
    passwd = job.exec(["cat", "/etc/passwd"])
    assert passwd.stdout.splitlines() == [
        "root:x:0:0:root:/root:/bin/sh",
        "nobody:x:65534:65534:nobody:/:/bin/false",
    ], passwd
    status = job.process_status()
    assert str(status.get("container", "")).startswith("iris-"), status
    job.kill()
    wait_until(lambda: _managed_containers(client) == [], timeout=60, what="no container left")


SPIN = """
import threading, time

def idle_helper_thread():
    while True:
        time.sleep(0.05)

def spin_the_wheel():
    n = 0
    while True:
        n += 1

threading.Thread(target=idle_helper_thread, name="helper", daemon=True).start()
print("spinning", flush=True)
spin_the_wheel()
"""


def test_profile_reaches_the_python_in_the_container(
    cluster: LocalCluster, client: IrisClient, workdir: Path
) -> None:
    """py-spy runs on the worker's machine against the container's task by its host pid (the
    image has no py-spy); the same CLI and route as for a process task."""
    result = run_iris(
        cluster, workdir, "job", "run", "--no-workspace", "--no-wait", "--json", "--image", PYTHON_IMAGE,
        "--", "python3", "-c", SPIN,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    job = client.job(json.loads(result.stdout)["job_id"])
    try:
        wait_until(lambda: "spinning" in "\n".join(job.logs()), timeout=90, what="the busy loop")
        threads = run_iris(cluster, workdir, "job", "profile", job.job_id, "--kind", "threads")
        assert threads.returncode == 0, threads.stderr
        assert "spin_the_wheel" in threads.stdout and "idle_helper_thread" in threads.stdout
        text = run_iris(cluster, workdir, "job", "profile", job.job_id, "--duration", "2s")
        assert text.returncode == 0, text.stderr
        assert "spin_the_wheel" in text.stdout and "samples" in text.stdout
        route = f"{cluster.url}/api/v1/tasks{job.job_id}/0:profile"
        flame = httpx.post(
            route, params={"kind": "cpu", "format": "svg", "duration_s": 1}, json={}, timeout=120
        )
        assert flame.headers["content-type"].startswith("image/svg+xml") and "spin_the_wheel" in flame.text
    finally:
        job.kill()
    wait_until(lambda: _managed_containers(client) == [], timeout=60, what="no container left")


# A container task plants an ``sh`` in its work dir (the host's, bind-mounted) and asked, at submit,
# for a PATH that looks there first (and a daemon of its choosing): the engine CLI and the profiler
# the worker runs for it, as root, must not take either from the task.
PLANT_SH = """
import os, time
with open("sh", "w") as f:
    f.write("#!/bin/sh\\nid -u > planted-sh-ran\\nexec /bin/sh \\"$@\\"\\n")
os.chmod("sh", 0o755)
print("planted", os.getcwd(), flush=True)
time.sleep(600)
"""


SECRET = "a-secret-the-cli-reads-not-on-argv"


def _cmdline(pid: str) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
    except OSError:
        return ""


def test_profiling_a_container_task_runs_nothing_of_the_tasks_environment(
    cluster: LocalCluster, client: IrisClient, workdir: Path
) -> None:
    result = run_iris(
        cluster, workdir, "job", "run", "--no-workspace", "--no-wait", "--json", "--image", PYTHON_IMAGE,
        "--env", "PATH=.:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        "--env", "DOCKER_HOST=unix:///nonexistent/docker.sock",
        "--env", f"DOCKER_TOKEN={SECRET}",
        "--", "python3", "-c", PLANT_SH,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    job = client.job(json.loads(result.stdout)["job_id"])
    try:
        wait_until(lambda: "planted" in "\n".join(job.logs()), timeout=90, what="the planted sh")
        work_dir = Path(next(line for line in job.logs() if "planted" in line).split()[-1])
        threads = run_iris(cluster, workdir, "job", "profile", job.job_id, "--kind", "threads")
        assert threads.returncode == 0, threads.stderr
        assert not (work_dir / "planted-sh-ran").exists()
        seen = run_iris(
            cluster,
            workdir,
            "job",
            "exec",
            job.job_id,
            "--",
            "printenv",
            "DOCKER_TOKEN",
            "DOCKER_HOST",
            "PATH",
        )
        assert seen.returncode == 0, seen.stderr
        # The container has them all ...
        assert seen.stdout.split() == [
            SECRET,
            "unix:///nonexistent/docker.sock",
            ".:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        ]
        # ... but not on a command line (any local user can read those while the task runs).
        assert not [pid for pid in os.listdir("/proc") if pid.isdigit() and SECRET in _cmdline(pid)]
        assert not (work_dir / "planted-sh-ran").exists()
    finally:
        job.kill()
    wait_until(lambda: _managed_containers(client) == [], timeout=60, what="no container left")


def test_usage_samples_the_container_processes(
    cluster: LocalCluster, client: IrisClient, workdir: Path
) -> None:
    hold = "import time; x = bytearray(120 * 1000 * 1000); print('holding', flush=True); time.sleep(600)"
    result = run_iris(
        cluster, workdir, "job", "run", "--no-workspace", "--no-wait", "--json", "--image", PYTHON_IMAGE,
        "--memory", "512MB", "--", "python3", "-c", hold,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    job = client.job(json.loads(result.stdout)["job_id"])

    def peak() -> int:
        return job.summary().tasks[0].peak_rss_bytes or 0

    # The docker CLI uses a few tens of MB; the task's 120 MB are only in the container's tree.
    wait_until(lambda: peak() >= 120 * 1000 * 1000, timeout=60, what="the container's memory sampled")
    job.kill()
    wait_until(lambda: _managed_containers(client) == [], timeout=60, what="no container left")


def test_a_python_callable_runs_in_the_image_and_returns_its_value(client: IrisClient) -> None:
    def where_am_i(offset: int) -> tuple[str, int, bool]:
        import os
        import platform

        # The image's Python (Debian bookworm's 3.11), no /work from the host; pydantic comes from
        # the worker's fallback copies (the image has none), so the Iris client imports.
        import iris.client  # noqa: F401

        return platform.python_version(), int(os.environ["IRIS_TASK_INDEX"]) + offset, os.path.exists("/work")

    job = client.submit(Entrypoint.from_callable(where_am_i, 40), image=PYTHON_IMAGE, workspace=False)
    [(version, index, host_work)] = job.result(timeout=90)
    assert version.startswith("3.11.") and index == 40 and host_work is False
    wait_until(lambda: _managed_containers(client) == [], what="no container left")


def test_a_callable_in_an_image_without_python_says_so(client: IrisClient) -> None:
    job = client.submit(Entrypoint.from_callable(print, "hi"), image=BUSYBOX_IMAGE, workspace=False)
    wait_until(lambda: job.detail().state.value == "FAILED", timeout=90, what="the job failed")
    wait_until(
        lambda: any("needs python3 in its image" in line.line for line in job.log_lines()),
        timeout=30,
        what="the attempt log saying the image has no python3",
    )


def test_a_fenced_worker_leaves_no_container_running(
    cluster: LocalCluster, client: IrisClient, workdir: Path
) -> None:
    result = run_iris(
        cluster, workdir, "job", "run", "--no-workspace", "--no-wait", "--json", "--image", BUSYBOX_IMAGE,
        "--max-preemptions", "0", "--", "sleep", "600",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    job = client.job(json.loads(result.stdout)["job_id"])
    worker = cluster.workers[0]
    [running] = wait_until(lambda: _managed_containers(client), timeout=60, what="the container running")
    # It cannot reconcile: its watchdog fences it, killing the container's processes with the CLI.
    os.kill(worker.proc.pid, signal.SIGSTOP)
    try:
        wait_until(
            lambda: running not in _managed_containers(client, [worker.name]),
            timeout=60,
            what="the stopped worker's container removed",
        )
    finally:
        os.kill(worker.proc.pid, signal.SIGCONT)
    wait_until(lambda: job.detail().state.value != "RUNNING", timeout=60, what="the fenced attempt ended")
    job.kill()
    wait_until(lambda: _managed_containers(client) == [], timeout=60, what="no container left")
