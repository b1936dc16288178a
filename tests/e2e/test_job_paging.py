"""A job of many tasks answers with a page of them; its counts and the SDK still see them all."""

from __future__ import annotations

import httpx

from iris.client import Entrypoint, IrisClient, JobState, LocalCluster, ResourceSpec
from iris.rpc.models import DEFAULT_TASK_PAGE, MAX_TASK_PAGE


def test_job_detail_pages_its_tasks(tmp_path) -> None:
    with LocalCluster(workers=0, state_dir=tmp_path) as cluster, IrisClient(cluster.url) as client:
        job = client.submit(
            Entrypoint.from_command("true"), name="wide", replicas=2500, resources=ResourceSpec(cpu=1)
        )
        first = job.detail()
        assert len(first.tasks) == DEFAULT_TASK_PAGE and first.task_offset == 0
        assert first.task_counts == {"PENDING": 2500}  # counts cover every task, not the page
        assert [t.task_index for t in first.tasks[:3]] == [0, 1, 2]
        last = job.detail(task_offset=2400, task_limit=200)
        assert [t.task_index for t in last.tasks] == list(range(2400, 2500)) and last.task_offset == 2400
        assert job.detail(task_limit=0).tasks == [] and job.status() is JobState.PENDING
        assert [t.task_index for t in job.tasks()] == list(range(2500))
        too_big = httpx.get(
            f"{cluster.url}/api/v1/jobs/{job.job_id.lstrip('/')}?task_limit={MAX_TASK_PAGE + 1}"
        )
        assert too_big.status_code == 400 and too_big.json()["error"]["code"] == "invalid_argument"
        job.kill()
