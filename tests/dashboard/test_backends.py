"""Tabs and pages follow the backend: a KUBERNETES controller shows Cluster and never Workers or
Autoscaler; an autoscaler's status renders whatever fields it reports."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from tests.conftest import wait_until
from tests.dashboard.conftest import SMALL, open_page, screenshot

from iris.client import Entrypoint, IrisClient, LocalCluster
from iris.rpc.enums import JobState

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def k8s_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LocalCluster, str]]:
    """A KUBERNETES controller on the local sandbox (fake API server, Kueue and kubelet simulators)."""
    root: Path = tmp_path_factory.mktemp("k8s-dash")
    with LocalCluster(backend="kubernetes", workers=0, state_dir=root) as lc:
        client = IrisClient(lc.url)
        job = client.submit(
            Entrypoint.from_command("sleep", "120"), name="podjob", resources=SMALL, user="kate"
        )
        wait_until(lambda: job.status() is JobState.RUNNING, timeout=30, what="pod job running")
        yield lc, job.job_id
        client.close()


def test_kubernetes_controller_shows_cluster_not_workers(page, page_errors, k8s_cluster) -> None:
    lc, job_id = k8s_cluster
    open_page(page, lc.url, "/jobs", ".page-jobs[data-loaded]")
    tabs = page.locator("#tabs .tab").all_inner_texts()
    assert "Cluster" in tabs
    assert "Workers" not in tabs and "Autoscaler" not in tabs
    assert page.locator(f'tr[data-job-id="{job_id}"]').get_attribute("data-state") == "RUNNING"

    page.click('#tabs [data-tab="cluster"]')
    page.wait_for_selector(".page-cluster[data-loaded]")
    overview = httpx.get(f"{lc.url}/api/v1/cluster/overview", timeout=10).json()
    nodes = page.locator('[data-section="nodes"] tr[data-node]')
    assert nodes.count() == len(overview["nodes"]) > 0
    assert nodes.evaluate_all("rs => rs.map(r => r.dataset.node)") == [n["name"] for n in overview["nodes"]]
    assert nodes.first.locator(".badge").inner_text() == "ready"
    text = page.locator(".page-cluster").inner_text()
    assert "namespace" in text and "Kueue workloads" in text
    screenshot(page, "cluster-kubernetes")

    page.goto(f"{lc.url}/#/workers")
    page.wait_for_selector(".notice.info")
    assert "does not apply" in page.locator(".notice.info").inner_text()


AUTOSCALER_STATUS = {
    "groups": [
        {
            "name": "cpu-small",
            "slices": {"READY": 2, "BOOTING": 1},
            "demand": 3,
            "target": 3,
            "min_slices": 0,
            "max_slices": 4,
            "last_action": {"action": "scale_up", "ts": 0},
            "status": "HEALTHY",
            "backoff_until": None,
            "zone": "local-a",
        },
        {
            "name": "gpu-a100",
            "slices": {"FAILED": 1},
            "demand": 2,
            "target": 0,
            "min_slices": 0,
            "max_slices": 2,
            "last_action": None,
            "status": "BACKOFF",
            "backoff_until": 0,
        },
    ],
    "actions": [
        {
            "ts": 0,
            "group": "cpu-small",
            "action": "scale_up",
            "slice_id": "cpu-small-3",
            "reason": "3 tasks need 1 cpu",
        },
        {
            "ts": 0,
            "group": "gpu-a100",
            "action": "boot_failed",
            "slice_id": "gpu-a100-1",
            "reason": "quota exceeded",
        },
    ],
}


def test_autoscaler_page_renders_the_status_shape(page, seeded) -> None:  # type: ignore[no-untyped-def]
    """No local controller wires an autoscaler status yet, so the two answers the page needs come
    from the announced shape; everything else is the real cluster."""
    now = time.time()
    status = json.loads(json.dumps(AUTOSCALER_STATUS))
    status["groups"][0]["last_action"]["ts"] = now - 30
    status["groups"][1]["backoff_until"] = now + 90
    for a in status["actions"]:
        a["ts"] = now - 20

    def dashboard(route) -> None:  # type: ignore[no-untyped-def]
        real = route.fetch().json()
        real["capabilities"] = [*real["capabilities"], "autoscaler"]
        route.fulfill(json=real)

    page.route("**/api/v1/dashboard", dashboard)
    page.route("**/api/v1/autoscaler", lambda route: route.fulfill(json=status))
    open_page(page, seeded.url, "/autoscaler", ".page-autoscaler[data-loaded]")
    assert "Autoscaler" in page.locator("#tabs .tab").all_inner_texts()
    small = page.locator('tr[data-group="cpu-small"]').inner_text()
    assert "ready 2" in small and "booting 1" in small and "demand 3 · target 3" in small
    assert "local-a" in small, "unknown fields are still shown"
    gpu = page.locator('tr[data-group="gpu-a100"]').inner_text()
    assert "backoff" in gpu and "in 1m" in gpu
    actions = page.locator(".page-autoscaler").inner_text()
    assert "quota exceeded" in actions and "boot failed" in actions
    screenshot(page, "autoscaler")
