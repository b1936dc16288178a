"""A real network partition (the worker in its own network namespace, its veth link cut): the
partitioned worker kills its own attempt before the controller's retry starts elsewhere, and once
the link is back it serves again. Root only (CI runs as root)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from tests.conftest import wait_until
from tests.e2e.retry_watch import start_stamped_job, watch_retry

from iris.client import JobState, LocalCluster
from iris.rpc.http import HttpClient
from iris.testing.netns import NetnsLink, netns_available

pytestmark = pytest.mark.skipif(not netns_available(), reason="network namespaces need root and ip(8)")


def test_partitioned_worker_kills_its_attempt_before_the_retry_starts(tmp_path: Path) -> None:
    stamps = tmp_path / "stamps"
    with (
        NetnsLink(f"iris-p{os.getpid() % 10000}", subnet=77 + os.getpid() % 100) as link,
        LocalCluster(
            workers=0, host=link.host_ip, state_dir=tmp_path / "state", worker_grace_s=6.0, tick_s=0.5
        ) as lc,
    ):
        # The first worker lives behind the link; the job starts there (it is the only worker).
        lc.add_worker(0, host=link.ns_ip, launcher=link.exec_prefix)
        job, first_pid, first_worker = start_stamped_job(lc.url, stamps, "partitioned")
        assert first_worker == "worker-0"
        lc.add_worker(1)  # beside the controller, where the retry can go
        link.partition()
        try:
            retry = watch_retry(stamps, first_pid)
            assert retry.worker == "worker-1"
            assert retry.first_died_at is not None, (
                "the partitioned attempt was still running when its retry started"
            )
            assert retry.first_died_at < retry.started_at
            log = (tmp_path / "state" / "workers" / "worker-0" / "attempts").glob("*.jsonl")
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
