"""Many jobs in one API call: each runs as if submitted alone; bad batches are one JSON 400."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from iris.client import Entrypoint, IrisClient, JobState, ResourceSpec
from iris.rpc.errors import AlreadyExists
from iris.rpc.models import MAX_JOBS_PER_SUBMIT

SMALL = ResourceSpec(cpu=0.5, memory="64MB")


@pytest.fixture(scope="module")
def client() -> Iterator[IrisClient]:
    with IrisClient.local(workers=1, worker_cpu="2", worker_memory="2GB") as c:
        yield c


def test_submit_many_runs_every_job_in_order(client: IrisClient) -> None:
    specs = [
        client.build_spec(
            Entrypoint.from_command("sh", "-c", f"echo job {i}"), name=f"many-{i}", resources=SMALL
        )
        for i in range(5)
    ]
    specs.append(
        client.build_spec(Entrypoint.from_command("true"), name="many-wide", replicas=3, resources=SMALL)
    )
    jobs = client.submit_many(specs)
    assert [j.job_id.rsplit("/", 1)[1] for j in jobs] == [*(f"many-{i}" for i in range(5)), "many-wide"]
    for i, job in enumerate(jobs[:5]):
        assert job.wait(timeout=60).state is JobState.SUCCEEDED
        assert job.logs() == [f"job {i}"]
    wide = jobs[5].wait(timeout=60)
    assert wide.state is JobState.SUCCEEDED and len(wide.tasks) == 3


def test_a_name_taken_by_a_live_job_is_refused(client: IrisClient) -> None:
    sleeper = client.build_spec(Entrypoint.from_command("sleep", "600"), name="held", resources=SMALL)
    (held,) = client.submit_many([sleeper])
    with pytest.raises(AlreadyExists):
        client.submit_many([sleeper])
    held.kill()


def test_a_batch_with_one_rejected_job_stores_none_of_it(client: IrisClient) -> None:
    """The controller checks the whole batch in one transaction: a name used twice in it (the
    second is refused as a live job's) leaves neither job behind."""
    specs = [
        client.build_spec(Entrypoint.from_command("true"), name=name, resources=SMALL)
        for name in ("atomic-a", "atomic-b", "atomic-a")
    ]
    with pytest.raises(AlreadyExists, match="atomic-a is still pending"):
        client.submit_many(specs)
    names = {j.name for j in client.list_jobs(limit=1000).jobs}
    assert not names & {"atomic-a", "atomic-b"}, names


def test_malformed_batches_are_a_json_400(client: IrisClient) -> None:
    good = client.build_spec(Entrypoint.from_command("true"), name="fine", resources=SMALL)
    bad = good.model_dump(mode="json") | {"replicas": 0}
    for body in (
        {"jobs": []},
        {"jobs": [good.model_dump(mode="json"), bad]},
        {
            "jobs": [{"name": "fine", "entrypoint": {"kind": "command", "argv": ["true"]}}]
            * (MAX_JOBS_PER_SUBMIT + 1)
        },
        {"job": []},
    ):
        answer = httpx.post(f"{client.url}/api/v1/jobs:batch", json=body, timeout=60)
        assert answer.status_code == 400, answer.text
        assert answer.json()["error"]["code"] == "invalid_argument"
    assert "fine" not in {j.name for j in client.list_jobs(limit=1000).jobs}  # nothing of it was stored


def test_a_batch_over_one_calls_size_is_split(client: IrisClient) -> None:
    padding = {"PAD": "x" * 100_000}  # ~100 kB a spec: 30 specs need two calls under the cap
    specs = [
        client.build_spec(Entrypoint.from_command("true"), name=f"padded-{i}", resources=SMALL, env=padding)
        for i in range(30)
    ]
    jobs = client.submit_many(specs)
    assert [j.job_id.rsplit("/", 1)[1] for j in jobs] == [f"padded-{i}" for i in range(30)]
    assert jobs[-1].wait(timeout=60).state is JobState.SUCCEEDED
