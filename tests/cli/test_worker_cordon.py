"""`iris worker cordon|drain|uncordon` against a real local cluster: the list says why, the
scheduler places nothing there until uncordoned."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.cli.helpers import run_iris
from tests.conftest import wait_until

from iris.client import Entrypoint, IrisClient, JobState, ResourceSpec
from iris.client.local_cluster import LocalCluster

pytestmark = pytest.mark.timeout(600)


def test_cordon_shows_in_worker_list_blocks_placement_and_uncordon_restores(
    cluster: LocalCluster, client: IrisClient, workdir: Path
) -> None:
    worker_id = client.workers().workers[0].worker_id
    done = run_iris(cluster, workdir, "worker", "cordon", worker_id, "--reason", "flaky NIC")
    assert done.returncode == 0, done.stderr
    listed = run_iris(cluster, workdir, "worker", "list")
    assert "CORDONED" in listed.stdout and "flaky NIC" in listed.stdout and "REASON" in listed.stdout
    job = client.submit(
        Entrypoint.from_command("true"), name="cordoned-wait", resources=ResourceSpec(cpu=0.1, memory="32MB")
    )
    wait_until(lambda: job.detail().pending_reason is not None, timeout=60, what="a pending reason")
    assert job.status() is JobState.PENDING
    done = run_iris(cluster, workdir, "worker", "uncordon", worker_id)
    assert done.returncode == 0, done.stderr
    assert job.wait(timeout=120).state is JobState.SUCCEEDED
    assert "CORDONED" not in run_iris(cluster, workdir, "worker", "list").stdout
    missing = run_iris(cluster, workdir, "worker", "drain", "no-such-worker")
    assert missing.returncode == 1 and "no-such-worker is not registered" in missing.stderr
    assert "Traceback" not in missing.stderr
