"""`iris job profile` on a running Python busy loop: py-spy's top functions, flame graph and
thread dump name the busy function (run on the task's worker through the exec path)."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import httpx
import pytest
from tests.cli.helpers import run_iris
from tests.conftest import wait_until

from iris.client import Entrypoint, IrisClient, JobState, ResourceSpec
from iris.client.local_cluster import LocalCluster

pytestmark = pytest.mark.timeout(600)

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


def test_profile_names_the_busy_function(cluster: LocalCluster, client: IrisClient, workdir: Path) -> None:
    job = client.submit(
        Entrypoint.from_command(sys.executable, "-c", SPIN),
        name="spin",
        resources=ResourceSpec(cpu=0.5, memory="128MB"),
    )
    try:
        wait_until(lambda: "spinning" in "\n".join(job.logs()), timeout=120, what="the busy loop")
        text = run_iris(cluster, workdir, "job", "profile", job.job_id, "--task", "0", "--duration", "2s")
        assert text.returncode == 0, text.stderr
        assert "spin_the_wheel" in text.stdout and "samples" in text.stdout
        svg = run_iris(cluster, workdir, "job", "profile", job.job_id, "--duration", "2", "-o", "flame.svg")
        assert svg.returncode == 0, svg.stderr
        drawn = (workdir / "flame.svg").read_text()
        assert drawn.lstrip().startswith("<?xml") or "<svg" in drawn[:500]
        assert "spin_the_wheel" in drawn
        threads = run_iris(cluster, workdir, "job", "profile", job.job_id, "--kind", "threads")
        assert threads.returncode == 0, threads.stderr
        assert "spin_the_wheel" in threads.stdout and "idle_helper_thread" in threads.stdout
        route = f"{cluster.url}/api/v1/tasks{job.job_id}/0:profile"
        dump = httpx.post(route, params={"kind": "threads"}, json={}, timeout=120)
        assert dump.status_code == 200 and "spin_the_wheel" in dump.text
        flame = httpx.post(
            route, params={"kind": "cpu", "format": "svg", "duration_s": 1}, json={}, timeout=120
        )
        assert flame.headers["content-type"].startswith("image/svg+xml") and "spin_the_wheel" in flame.text
        if shutil.which("gdb"):  # memray attaches through gdb (or lldb)
            memory = run_iris(
                cluster, workdir, "job", "profile", job.job_id, "--kind", "memory", "--duration", "1s"
            )
            assert memory.returncode == 0, memory.stderr
            assert "Total allocations" in memory.stdout
    finally:
        job.kill()
    ended = run_iris(cluster, workdir, "job", "profile", job.job_id, "--kind", "threads")
    assert job.status() is JobState.KILLED
    assert ended.returncode == 1 and "not running" in ended.stderr and "Traceback" not in ended.stderr
