"""Tabs and pages follow the backend: a KUBERNETES controller shows Cluster and never Workers or
Autoscaler; an autoscaler's status renders whatever fields it reports."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from tests.conftest import wait_until
from tests.dashboard.conftest import SMALL, open_page, screenshot

from iris.client import Entrypoint, IrisClient, LocalCluster, ResourceSpec
from iris.rpc.enums import JobState
from iris.testing.control_plane import ControlPlane

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def k8s_cluster(
    tmp_path_factory: pytest.TempPathFactory, real_control_plane: ControlPlane
) -> Iterator[tuple[LocalCluster, str]]:
    """A KUBERNETES controller on the session's real control plane (node-agent nodes)."""
    root: Path = tmp_path_factory.mktemp("k8s-dash")
    cp = real_control_plane
    with LocalCluster(
        backend="kubernetes",
        workers=0,
        state_dir=root,
        kubeconfig=cp.controller_kubeconfig,
        namespace=cp.namespace,
        local_queue=cp.local_queue,
    ) as lc:
        client = IrisClient(lc.url)
        job = client.submit(
            Entrypoint.from_command("sleep", "120"), name="podjob", resources=SMALL, user="kate"
        )
        wait_until(lambda: job.status() is JobState.RUNNING, timeout=90, what="pod job running")
        yield lc, job.job_id
        job.kill()  # its pod goes now, not 120 s later on the shared plane
        client.close()


@pytest.mark.real_k8s
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


AUTOSCALED_CONFIG = """
controller: {{port: 0, state_dir: {state}}}
backend: {{kind: worker-daemon, backend_id: local, display_name: Autoscaled}}
platform: {{kind: local}}
scale_groups:
  broken: {{resources: {{cpu: 1, memory: 1GB}}, max_slices: 2, priority: 1, local: {{fail_boot: true}}}}
  small: {{resources: {{cpu: 1, memory: 1GB}}, max_slices: 2, priority: 2}}
defaults:
  autoscaler:
    evaluation_interval_s: 0.5
    scale_down_delay_s: 600
    boot_timeout_s: 30
    backoff: {{failure_threshold: 2, window_s: 60, initial_s: 60, max_s: 120}}
  worker: {{reconcile_interval_s: 0.5, unreachable_grace_s: 10}}
"""


@pytest.fixture(scope="module")
def autoscaled(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """A real autoscaled cluster: the preferred group fails every boot, the next one takes the work."""
    root: Path = tmp_path_factory.mktemp("autoscaled-dash")
    config = root / "cluster.yaml"
    config.write_text(AUTOSCALED_CONFIG.format(state=root / "state"))
    with LocalCluster(workers=0, state_dir=root, controller_args=["--config", str(config)]) as lc:
        client = IrisClient(lc.url)
        job = client.submit(Entrypoint.from_command("sleep", "120"), name="scaled", resources=SMALL)
        wait_until(
            lambda: job.status() is JobState.RUNNING, timeout=90, what="job running on an autoscaled worker"
        )
        yield lc
        client.close()


def test_autoscaler_page_shows_real_groups_and_actions(page, page_errors, autoscaled) -> None:  # type: ignore[no-untyped-def]
    open_page(page, autoscaled.url, "/autoscaler", ".page-autoscaler[data-loaded]")
    tabs = page.locator("#tabs .tab").all_inner_texts()
    assert "Autoscaler" in tabs and "Workers" in tabs and "Cluster" not in tabs
    small = page.locator('tr[data-group="small"]').inner_text()
    assert "ready 1" in small
    broken = page.locator('tr[data-group="broken"]').inner_text()
    assert "backoff" in broken
    actions = page.locator(".page-autoscaler").inner_text()
    assert "scale up" in actions and "boot" in actions
    assert page_errors.unexpected() == []
    screenshot(page, "autoscaler")


def test_autoscaler_demand_counts_the_tasks_that_wait(page, page_errors, autoscaled) -> None:  # type: ignore[no-untyped-def]
    """Three more 1-cpu tasks while one of small's two slices is busy: one new slice takes one task,
    the other two wait for room, and the page counts all of them, never "demand 0"."""
    client = IrisClient(autoscaled.url)
    whole_cpu = ResourceSpec(cpu=1, memory="256MB")  # the busy slice has no whole cpu left
    job = client.submit(Entrypoint.from_command("sleep", "120"), name="more", replicas=3, resources=whole_cpu)
    try:
        open_page(page, autoscaled.url, "/autoscaler", ".page-autoscaler[data-loaded]")
        wait_until(
            lambda: re.search(r"demand [23] tasks", page.locator(".page-autoscaler").inner_text()),
            timeout=30,
            what="the waiting tasks counted as demand",
        )
        screenshot(page, "autoscaler-demand")
    finally:
        job.kill()
        client.close()
    assert page_errors.unexpected() == []


AUTH_CONFIG = """
controller: {{port: 0, state_dir: {state}}}
backend: {{kind: worker-daemon, backend_id: secure, display_name: Secure}}
auth:
  tokens:
    - {{token: alice-token-123, role: user, user: alice}}
    - {{token: bob-token-12345, role: user, user: bob}}
    - {{token: worker-token-123, role: worker}}
"""


def test_dashboard_asks_for_a_token_and_shows_only_that_users_jobs(page, page_errors, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    config = tmp_path / "cluster.yaml"
    config.write_text(AUTH_CONFIG.format(state=tmp_path / "state"))
    with LocalCluster(
        workers=0, state_dir=tmp_path, controller_args=["--config", str(config)], token="alice-token-123"
    ) as lc:
        IrisClient(lc.url, token="alice-token-123").submit(
            Entrypoint.from_command("true"), name="alices", resources=SMALL
        )
        IrisClient(lc.url, token="bob-token-12345").submit(
            Entrypoint.from_command("true"), name="bobs", resources=SMALL
        )
        prompts: list[str] = []

        def answer(dialog) -> None:  # type: ignore[no-untyped-def]
            prompts.append(dialog.message)
            dialog.accept("alice-token-123")

        page.on("dialog", answer)
        page_errors.allow("401")  # the first answers, before the page has a token
        open_page(page, lc.url, "/jobs", ".page-jobs[data-loaded]")
        wait_until(
            lambda: "/alice/alices" in page.locator(".page-jobs").inner_text(),
            timeout=30,
            what="alice's job listed",
        )
        assert prompts and "token" in prompts[0]
        assert "/bob/bobs" not in page.locator(".page-jobs").inner_text()
        all_chip = page.locator('.chip[data-state="ALL"] .n')
        wait_until(lambda: all_chip.inner_text() == "1", timeout=30, what="counts of alice's jobs only")
        screenshot(page, "jobs-with-token")
