"""``GET /metrics`` on a real local cluster: the series move as jobs run, stop and fail."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from tests.conftest import wait_until

from iris.client import Entrypoint, IrisClient, JobState
from iris.client.local_cluster import LocalCluster

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def scrape(url: str) -> Samples:
    """Every sample of a /metrics page, keyed by (name, labels); parsing fails on a malformed page."""
    response = httpx.get(f"{url}/metrics", timeout=10)
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    samples: Samples = {}
    for family in text_string_to_metric_families(response.text):
        for s in family.samples:
            samples[(s.name, frozenset(s.labels.items()))] = s.value
    return samples


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


def total(samples: Samples, name: str, **labels: str) -> float:
    """Sum over every series of ``name`` whose labels include ``labels``."""
    want = set(labels.items())
    return sum(v for (n, ls), v in samples.items() if n == name and want <= ls)


@pytest.fixture(scope="module")
def client() -> Iterator[IrisClient]:
    with IrisClient.local(workers=1, worker_cpu="4") as c:
        yield c


@pytest.fixture(scope="module")
def worker_url(client: IrisClient) -> str:
    return "http://" + client.workers().workers[0].address


def test_controller_series_move_as_jobs_finish(client: IrisClient, worker_url: str) -> None:
    before = scrape(client.url)
    worker_before = scrape(worker_url)

    job = client.submit(Entrypoint.from_command("true"), replicas=3)
    assert job.wait(timeout=30).state is JobState.SUCCEEDED
    failed = client.submit(Entrypoint.from_command("sh", "-c", "exit 3"))
    assert failed.wait(timeout=30).state is JobState.FAILED

    after = scrape(client.url)
    assert value(after, "iris_tasks", state="SUCCEEDED") == value(before, "iris_tasks", state="SUCCEEDED") + 3
    assert value(after, "iris_tasks", state="FAILED") == value(before, "iris_tasks", state="FAILED") + 1
    assert value(after, "iris_jobs", state="SUCCEEDED") == value(before, "iris_jobs", state="SUCCEEDED") + 1
    for histogram in ("iris_dispatch_latency_seconds", "iris_task_start_latency_seconds"):
        assert value(after, f"{histogram}_count") == value(before, f"{histogram}_count") + 4, histogram
    assert value(after, "iris_scheduling_pass_seconds_count") > value(
        before, "iris_scheduling_pass_seconds_count"
    )
    assert value(after, "iris_reconcile_round_seconds_count") > value(
        before, "iris_reconcile_round_seconds_count"
    )
    for stage in ("order", "gate", "place", "reclaim", "explain"):  # every pass times each stage
        count = "iris_scheduler_stage_seconds_count"
        assert value(after, count, stage=stage) > value(before, count, stage=stage), stage
    assert value(after, "iris_workers", status="HEALTHY") == 1
    assert value(after, "iris_control_rounds_total") > value(before, "iris_control_rounds_total")

    # The worker counted the same attempts, by outcome.
    worker_after = wait_until(
        lambda: (
            s
            if value(s := scrape(worker_url), "iris_worker_attempts_finished_total", outcome="FAILED")
            > value(worker_before, "iris_worker_attempts_finished_total", outcome="FAILED")
            else None
        ),
        what="the worker to count the failed attempt",
    )
    succeeded = "iris_worker_attempts_finished_total"
    assert (
        value(worker_after, succeeded, outcome="SUCCEEDED")
        == value(worker_before, succeeded, outcome="SUCCEEDED") + 3
    )
    started = "iris_worker_attempts_started_total"
    assert value(worker_after, started) == value(worker_before, started) + 4
    assert value(worker_after, "iris_worker_reconcile_seconds_count") > value(
        worker_before, "iris_worker_reconcile_seconds_count"
    )
    assert value(worker_after, "process_resident_memory_bytes") > 0


def test_running_tasks_show_while_they_run(client: IrisClient, worker_url: str) -> None:
    job = client.submit(Entrypoint.from_command("sleep", "60"), replicas=2)
    try:
        wait_until(
            lambda: value(scrape(client.url), "iris_tasks", state="RUNNING") == 2, what="two RUNNING tasks"
        )
        assert value(scrape(client.url), "iris_jobs", state="RUNNING") >= 1
        wait_until(
            lambda: value(scrape(worker_url), "iris_worker_running_attempts") == 2,
            what="the worker to run two attempts",
        )
    finally:
        job.kill()
    wait_until(lambda: value(scrape(client.url), "iris_tasks", state="RUNNING") == 0, what="no RUNNING task")
    wait_until(
        lambda: value(scrape(worker_url), "iris_worker_attempts_finished_total", outcome="KILLED") >= 2,
        what="the worker to count two killed attempts",
    )
    assert value(scrape(client.url), "iris_tasks", state="KILLED") >= 2


def test_api_requests_are_labelled_by_route_template(client: IrisClient) -> None:
    job = client.submit(Entrypoint.from_command("true"))
    job.wait(timeout=30)
    job.detail()
    httpx.get(f"{client.url}/api/v1/jobs/nobody/nothing", timeout=10)  # a 404 is timed too
    samples = scrape(client.url)
    routes = {dict(labels)["route"] for (name, labels) in samples if name == "iris_api_request_seconds_count"}
    assert "/api/v1/jobs/{job_path:path}" in routes
    assert "/api/v1/jobs" in routes
    assert not [r for r in routes if job.job_id.lstrip("/") in r], routes  # never a raw job id
    assert total(samples, "iris_api_request_seconds_count", method="POST", route="/api/v1/jobs") >= 1
    assert (
        total(samples, "iris_api_request_seconds_count", method="GET", route="/api/v1/jobs/{job_path:path}")
        >= 2
    )


AUTOSCALED = """
backend: {kind: worker-daemon, backend_id: local}
platform: {kind: local}
scale_groups:
  small: {resources: {cpu: 1, memory: 1GB}, min_slices: 1, max_slices: 1, num_vms: 1}
defaults:
  autoscaler: {evaluation_interval_s: 0.2, boot_timeout_s: 30}
  worker: {reconcile_interval_s: 0.5}
"""


def test_autoscaler_actions_are_counted(tmp_path: Path) -> None:
    config = tmp_path / "cluster.yaml"
    config.write_text(AUTOSCALED)
    with LocalCluster(
        workers=0, state_dir=tmp_path / "state", controller_args=["--config", str(config)]
    ) as lc:
        samples = wait_until(
            lambda: (
                s
                if value(
                    s := scrape(lc.url), "iris_autoscaler_actions_total", group="small", action="slice_ready"
                )
                else None
            ),
            what="the slice_ready action to be counted",
        )
        assert value(samples, "iris_autoscaler_actions_total", group="small", action="scale_up") == 1
        # The slice is READY once its worker registered; the worker counts healthy from its first
        # reconcile, which may come a round later.
        wait_until(
            lambda: value(scrape(lc.url), "iris_workers", status="HEALTHY") == 1,
            what="the slice's worker to be counted healthy",
        )
        again = scrape(lc.url)  # counted once, however often it is scraped
        assert value(again, "iris_autoscaler_actions_total", group="small", action="scale_up") == 1
