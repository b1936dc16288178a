"""Each dashboard page loads against a real local cluster and shows what the API knows."""

from __future__ import annotations

import pytest
from tests.conftest import wait_until
from tests.dashboard.conftest import SeededCluster, open_page, screenshot

pytestmark = pytest.mark.browser


def test_tabs_follow_the_worker_backend_capabilities(page, seeded: SeededCluster) -> None:
    open_page(page, seeded.url, "/jobs", ".page-jobs[data-loaded]")
    tabs = page.locator("#tabs .tab").all_inner_texts()
    assert tabs[:3] == ["Jobs", "Scheduler", "Workers"]
    assert "Cluster" not in tabs, "a WORKER controller never shows the Cluster page"
    assert "Autoscaler" not in tabs, "no autoscaler is configured on this controller"
    assert tabs[-1] == "Status"
    assert page.locator("#cluster-name").inner_text() == "Iris workers"
    assert "up" in (page.locator("#conn").get_attribute("class") or "")
    page.goto(f"{seeded.url}/#/cluster")
    page.wait_for_selector(".notice.info")
    assert "does not apply" in page.locator(".notice.info").inner_text()


def test_jobs_page_shows_every_state(page, seeded: SeededCluster) -> None:
    open_page(page, seeded.url, "/jobs", ".page-jobs[data-loaded]")
    states = {}
    for key in ("hello", "broken", "sleeper", "huge", "doomed"):
        row = page.locator(f'tr[data-job-id="{seeded.jobs[key]}"]')
        states[key] = row.get_attribute("data-state")
    assert states == {
        "hello": "SUCCEEDED",
        "broken": "FAILED",
        "sleeper": "RUNNING",
        "huge": "PENDING",
        "doomed": "KILLED",
    }
    broken = page.locator(f'tr[data-job-id="{seeded.jobs["broken"]}"]')
    assert "exited with code 3" in broken.inner_text()
    screenshot(page, "jobs")


def test_job_page_of_a_failed_job(page, seeded: SeededCluster) -> None:
    job_id = seeded.jobs["broken"]
    open_page(page, seeded.url, f"/jobs{job_id}", ".page-job[data-loaded]")
    task = page.locator('tr[data-task-index="0"]')
    assert task.get_attribute("data-state") == "FAILED"
    assert "exited with code 3" in task.inner_text()
    page.wait_for_selector('.logview[data-complete="1"]')
    log = page.locator(".log-lines").inner_text()
    assert "about to fail" in log and "model diverged" in log
    assert page.locator(".log-lines .ln.stderr").filter(has_text="model diverged").count() == 1
    page.wait_for_selector(".card .event-kind")
    events = page.locator(".card.events, .events").inner_text()
    assert "task failed" in events and "job submitted" in events
    assert page.locator('[data-action="stop"]').count() == 0, "a finished job has no Stop button"
    screenshot(page, "job-failed")


def test_scheduler_page_explains_the_pending_job(page, seeded: SeededCluster) -> None:
    open_page(page, seeded.url, "/scheduler", ".page-scheduler[data-loaded]")
    row = page.locator(f'tr[data-task-id="{seeded.jobs["huge"]}/0"]')
    text = row.inner_text()
    assert "64 cpu" in text, text
    assert row.locator("td").first.inner_text().strip() == "1"
    assert page.locator('.band-card[data-band="INTERACTIVE"] .count').inner_text() == "1"
    screenshot(page, "scheduler")


def test_workers_page(page, seeded: SeededCluster) -> None:
    open_page(page, seeded.url, "/workers", ".page-workers[data-loaded]")
    rows = page.locator("tr[data-worker-id]")
    assert rows.count() == 2
    assert set(page.locator("tr[data-worker-id]").evaluate_all("rs => rs.map(r => r.dataset.status)")) == {
        "HEALTHY"
    }
    text = page.locator(".page-workers").inner_text()
    assert "/ 2 cpu" in text and "/ 2GB" in text
    assert page.locator(".meter-fill").count() == 4
    running = page.locator("tr[data-worker-id] a[href^='#/jobs/']").all_inner_texts()
    assert f"{seeded.jobs['sleeper']}/0" in running
    screenshot(page, "workers")


def test_workers_page_shows_a_cordon_and_its_reason(page, seeded: SeededCluster) -> None:
    worker_id = seeded.client.workers().workers[0].worker_id
    seeded.client.http.request(
        "POST", f"/api/v1/workers/{worker_id}:cordon", json_body={"reason": "bad disk"}
    )
    try:
        open_page(page, seeded.url, "/workers", ".page-workers[data-loaded]")
        row = page.locator(f'tr[data-worker-id="{worker_id}"]')
        assert row.get_attribute("data-cordon") == "CORDONED"
        assert "cordoned" in row.inner_text().lower() and "bad disk" in row.inner_text()
    finally:
        seeded.client.http.request("POST", f"/api/v1/workers/{worker_id}:uncordon")


def test_status_page_has_charts_and_controller_facts(page, seeded: SeededCluster) -> None:
    open_page(page, seeded.url, "/status", ".page-status[data-loaded]")
    text = page.locator(".stat-row").inner_text()
    assert "version" in text and "uptime" in text and "database" in text
    assert page.locator(".chart canvas").count() == 2
    assert "last round ms" in page.locator(".page-status").inner_text()
    screenshot(page, "status")


def test_endpoints_page(page, seeded: SeededCluster) -> None:
    open_page(page, seeded.url, "/jobs", ".page-jobs[data-loaded]")
    assert page.locator('#tabs [data-tab="endpoints"]').count() == 1
    page.click('#tabs [data-tab="endpoints"]')
    page.wait_for_selector(".page-endpoints[data-loaded]")
    assert "No task has registered an endpoint." in page.locator(".page-endpoints").inner_text()


def test_unknown_job_says_not_found_instead_of_an_empty_page(
    page, page_errors, seeded: SeededCluster
) -> None:
    page_errors.allow("404")
    page.goto(f"{seeded.url}/#/jobs/nobody/nothing")
    page.wait_for_selector('.page-job[data-not-found="1"]')
    text = page.locator(".page-job").inner_text()
    assert "Job /nobody/nothing not found" in text and "job /nobody/nothing does not exist" in text
    assert page.locator(".page-job .card").count() == 0, "no empty skeleton of cards"
    assert page.title() == "/nobody/nothing not found · Iris"
    screenshot(page, "job-not-found")


def test_the_title_follows_the_page(page, seeded: SeededCluster) -> None:
    job_id = seeded.jobs["broken"]
    open_page(page, seeded.url, f"/jobs{job_id}", ".page-job[data-loaded]")
    assert page.title() == f"{job_id} · Iris"
    page.goto(f"{seeded.url}/#/workers")
    page.wait_for_selector(".page-workers, .page")
    wait_until(lambda: page.title().startswith("Iris"), timeout=10, what="the title left the job")
    assert job_id not in page.title()


@pytest.mark.parametrize("route", ["/jobs", "/workers", "/scheduler", "/status"])
def test_pages_fit_a_laptop_screen(page, seeded: SeededCluster, route: str) -> None:
    page.set_viewport_size({"width": 1280, "height": 720})
    name = route.strip("/")
    open_page(page, seeded.url, route, f".page-{name}[data-loaded]")
    overflow = page.evaluate("document.documentElement.scrollWidth - document.documentElement.clientWidth")
    assert overflow <= 0, f"the {name} page scrolls sideways by {overflow}px at 1280px"
    if name == "jobs":
        screenshot(page, "jobs-laptop")


def test_job_page_fits_a_laptop_screen(page, seeded: SeededCluster) -> None:
    page.set_viewport_size({"width": 1280, "height": 720})
    open_page(page, seeded.url, f"/jobs{seeded.jobs['ticker']}", ".page-job[data-loaded]")
    overflow = page.evaluate("document.documentElement.scrollWidth - document.documentElement.clientWidth")
    assert overflow <= 0, f"the job page scrolls sideways by {overflow}px at 1280px"
    screenshot(page, "job-laptop")


def test_profile_button_of_a_running_task_that_is_not_python(
    page, page_errors, seeded: SeededCluster
) -> None:
    """The task row's Profile runs py-spy beside it; a shell's `sleep` gets one sentence back."""
    page_errors.allow("409")  # the profiler's refusal is a 409 FailedPrecondition
    open_page(page, seeded.url, f"/jobs{seeded.jobs['sleeper']}", ".page-job[data-loaded]")
    page.locator('tr[data-task-index="0"] button.profile-threads').click()
    page.wait_for_selector(".card.profile .notice.error", timeout=60_000)
    assert "not running Python" in page.locator(".card.profile").inner_text()
