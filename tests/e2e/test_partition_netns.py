"""A real network partition (the worker in its own network namespace, its veth link cut): the
partitioned worker kills its own attempt before the controller's retry starts elsewhere, and once
the link is back it serves again. Root only (CI runs as root)."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from tests.conftest import wait_until

from iris.client import Entrypoint, IrisClient, JobState, LocalCluster, ResourceSpec
from iris.rpc.http import HttpClient
from iris.testing.netns import NetnsLink, netns_available

pytestmark = pytest.mark.skipif(not netns_available(), reason="network namespaces need root and ip(8)")


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError):
        return False


def test_partitioned_worker_kills_its_attempt_before_the_retry_starts(tmp_path: Path) -> None:
    stamps = tmp_path / "stamps"
    stamps.touch(mode=0o666)
    os.chmod(tmp_path, 0o777)
    script = f'echo "$$ $(date +%s.%N) $IRIS_WORKER_ID" >> {stamps}; exec sleep 600'
    with (
        NetnsLink(f"iris-p{os.getpid() % 10000}", subnet=77 + os.getpid() % 100) as link,
        LocalCluster(
            workers=0, host=link.host_ip, state_dir=tmp_path / "state", worker_grace_s=6.0, tick_s=0.5
        ) as lc,
    ):
        # The first worker lives behind the link; the job starts there (it is the only worker).
        lc.add_worker(0, host=link.ns_ip, launcher=link.exec_prefix)
        client = IrisClient(lc.url)
        job = client.submit(
            Entrypoint.from_command("sh", "-c", script),
            name="partitioned",
            resources=ResourceSpec(cpu=0.5, memory="64MB"),
        )
        wait_until(lambda: stamps.read_text().strip(), timeout=60, what="the first attempt to start")
        first_pid, _, first_worker = stamps.read_text().split()
        assert first_worker == "worker-0"
        lc.add_worker(1)  # beside the controller, where the retry can go
        link.partition()
        try:
            died_at = None
            deadline = time.monotonic() + 90
            while len(stamps.read_text().split("\n")) < 3:  # a second line: the retry started
                if died_at is None and not alive(int(first_pid)):
                    died_at = time.time()
                if time.monotonic() > deadline:
                    raise AssertionError("the task was not retried on the other worker")
                time.sleep(0.02)
            _, second_started, second_worker = stamps.read_text().split("\n")[1].split()
            assert second_worker == "worker-1"
            assert died_at is not None, "the partitioned attempt was still running when its retry started"
            assert died_at < float(second_started)
            log = (tmp_path / "state" / "workers" / "worker-0" / "attempts").rglob("log.jsonl")
            assert any("not reconciled" in p.read_text() for p in log), "the worker did not say it fenced"
        finally:
            link.heal()
        # Back on the network, the worker registers again and is given work again.
        http = HttpClient(lc.url, timeout_s=5)

        def worker0_healthy() -> bool:
            rows = http.request("GET", "/api/v1/workers")["workers"]
            return any(
                w["worker_id"] == "worker-0" and w["status"] == "HEALTHY" and w["last_contact_at"]
                for w in rows
            )

        wait_until(worker0_healthy, timeout=60, what="the healed worker to be healthy again")
        http.close()
        assert job.kill() is JobState.KILLED
