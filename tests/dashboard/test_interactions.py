"""What a person does on the dashboard: watch jobs change live, follow a log, stop a job, filter,
sort and page, walk the job tree, copy the CLI equivalent."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys

import pytest
from tests.conftest import wait_until
from tests.dashboard.conftest import SMALL, SeededCluster, open_page, screenshot, wait_for_js

from iris.client import Entrypoint
from iris.rpc.enums import JobState

pytestmark = pytest.mark.browser


def test_jobs_table_updates_without_reload_when_a_job_finishes(page, seeded: SeededCluster) -> None:
    flag = seeded.flag_dir / "finish-waiter"
    job = seeded.client.submit(
        Entrypoint.from_command("sh", "-c", f"while [ ! -f {flag} ]; do sleep 0.05; done; echo finished"),
        name="waiter",
        resources=SMALL,
        user="dave",
    )
    open_page(page, seeded.url, "/jobs?user=dave", ".page-jobs[data-loaded]")
    row = f'tr[data-job-id="{job.job_id}"]'
    page.wait_for_selector(f'{row}[data-state="RUNNING"]')
    page.evaluate("window.__sameDocument = 'yes'")
    flag.touch()
    page.wait_for_selector(f'{row}[data-state="SUCCEEDED"]', timeout=20_000)
    assert page.evaluate("window.__sameDocument") == "yes", "the page reloaded instead of updating"
    assert page.locator(f"{row} .badge").inner_text().strip() == "succeeded"


def test_log_view_follows_a_running_task(page, seeded: SeededCluster) -> None:
    ticker = seeded.jobs["ticker"]
    open_page(page, seeded.url, f"/jobs{ticker}/0", ".page-job[data-loaded]")
    page.wait_for_selector(".log-lines .ln >> text=/tick \\d+/")
    last_tick = """() => {
        const ticks = [...document.querySelectorAll('.log-lines .ln .tx')]
            .map(e => /^tick (\\d+)$/.exec(e.textContent)).filter(Boolean).map(m => Number(m[1]));
        return ticks.length ? ticks[ticks.length - 1] : -1;
    }"""
    first = page.evaluate(last_tick)
    wait_for_js(page, f"({last_tick})() >= {first + 5}", timeout=15)
    assert page.locator('input[name="follow"]').is_checked()
    assert "following" in page.locator(".log-status").inner_text()
    at_bottom = page.evaluate(
        "() => { const el = document.querySelector('.log-lines');"
        " return el.scrollHeight - el.scrollTop - el.clientHeight < 40; }"
    )
    assert at_bottom, "a followed log stays scrolled to its newest line"
    ticks = page.evaluate(
        "() => [...document.querySelectorAll('.log-lines .ln .tx')].map(e => e.textContent)"
        ".filter(t => t.startsWith('tick ')).map(t => Number(t.slice(5)))"
    )
    assert ticks == list(range(ticks[0], ticks[0] + len(ticks))), "lines arrive once each, in order"
    screenshot(page, "job-logs-follow")

    page.uncheck('input[name="follow"]')
    paused_count = page.locator(".log-lines .ln").count()
    assert "paused" in page.locator(".log-status").inner_text()

    def server_has_more() -> bool:
        params = {"offset": 0, "limit": 10_000}
        resp = seeded.client.http.request("GET", f"/api/v1/tasks{ticker}/0:logs", params=params)
        return len(resp["lines"]) > paused_count + 3

    wait_until(server_has_more, timeout=15, what="the task to print more lines")
    assert page.locator(".log-lines .ln").count() == paused_count, "a paused log does not grow"


def test_stop_asks_for_confirmation_then_kills_the_job(page, seeded: SeededCluster) -> None:
    job = seeded.client.submit(
        Entrypoint.from_command("sleep", "300"), name="victim", resources=SMALL, user="erin"
    )
    wait_until(lambda: job.status() is JobState.RUNNING, timeout=30, what="victim running")
    open_page(page, seeded.url, f"/jobs{job.job_id}", ".page-job[data-loaded]")
    page.wait_for_selector('.job-head .badge:text("running")')

    page.click('[data-action="stop"]')
    page.wait_for_selector("dialog.confirm[open]")
    assert job.job_id in page.locator("dialog.confirm").inner_text()
    screenshot(page, "job-stop-confirm")
    page.click('dialog.confirm button[value="cancel"]')
    page.wait_for_selector("dialog.confirm", state="detached")
    assert job.status() is JobState.RUNNING, "cancel leaves the job alone"

    page.click('[data-action="stop"]')
    page.click("dialog.confirm button[data-confirm]")
    page.wait_for_selector('.job-head .badge:text("killed")', timeout=20_000)
    assert job.status() is JobState.KILLED
    assert page.locator('[data-action="stop"]').count() == 0


def test_filters_sort_and_pages(page, seeded: SeededCluster) -> None:
    for i in range(30):
        seeded.client.submit(
            Entrypoint.from_command("true"), name=f"bulk-{i:02d}", resources=SMALL, user="bulk"
        )
    open_page(page, seeded.url, "/jobs?user=bulk&size=25", ".page-jobs[data-loaded]")
    assert page.locator("tbody tr").count() == 25
    assert page.locator(".pager .range").inner_text() == "1–25 of 30"
    page.click('.pager [data-page="next"]')
    wait_for_js(page, "document.querySelector('.pager .range').textContent === '26–30 of 30'")
    assert page.locator("tbody tr").count() == 5
    assert "page=2" in page.evaluate("location.hash")

    page.click('th [data-sort="job_id"]')
    wait_for_js(page, "document.querySelector('.pager .range').textContent === '1–25 of 30'")
    ids = page.locator("tbody tr").evaluate_all("rs => rs.map(r => r.dataset.jobId)")
    assert ids == [f"/bulk/bulk-{i:02d}" for i in range(25)], "ascending by id after one click"
    assert "sort=job_id" in page.evaluate("location.hash")

    page.fill('input[name="user"]', "alice")
    page.click('.chips [data-state="FAILED"]')
    wait_for_js(
        page,
        "() => { const rs = [...document.querySelectorAll('tbody tr')];"
        " return rs.length === 1 && rs[0].dataset.state === 'FAILED'; }",
    )
    assert page.locator("tbody tr").first.get_attribute("data-job-id") == seeded.jobs["broken"]
    assert "state=FAILED" in page.evaluate("location.hash")
    page.reload()
    page.wait_for_selector(".page-jobs[data-loaded]")
    assert page.locator("tbody tr").count() == 1, "filters live in the address and survive a reload"
    assert page.locator('.chips [data-state="FAILED"]').get_attribute("aria-pressed") == "true"


def test_pending_job_says_why_it_waits(page, seeded: SeededCluster) -> None:
    huge = seeded.jobs["huge"]
    open_page(page, seeded.url, f"/jobs{huge}", ".page-job[data-loaded]")
    page.wait_for_selector('tr[data-task-index="0"] .reason')
    assert "needs 64 cpu" in page.locator('tr[data-task-index="0"]').inner_text()
    assert "has not started yet" in page.locator(".log-lines").inner_text()
    screenshot(page, "job-pending")
    open_page(page, seeded.url, "/jobs?state=PENDING", ".page-jobs[data-loaded]")
    page.wait_for_selector(f'tr[data-job-id="{huge}"] .reason')
    assert "needs 64 cpu" in page.locator(f'tr[data-job-id="{huge}"]').inner_text()


def test_job_tree_links_parent_and_sub_jobs(page, seeded: SeededCluster) -> None:
    parent, child = seeded.jobs["pipeline"], seeded.jobs["stage1"]
    open_page(page, seeded.url, f"/jobs{parent}", ".page-job[data-loaded]")
    page.wait_for_selector(f'tr[data-job-id="{child}"]')
    page.click(f'tr[data-job-id="{child}"] a')
    page.wait_for_selector(f'.page-job[data-job-id="{child}"][data-loaded]')
    crumbs = page.locator(".crumbs a")
    assert crumbs.all_inner_texts() == ["Jobs", "carol", "pipeline"]
    assert crumbs.nth(2).get_attribute("href") == f"#/jobs{parent}"
    assert parent in page.locator(".summary").inner_text()


def test_copy_cli_equivalent_resubmits_the_same_job(browser, seeded: SeededCluster, tmp_path) -> None:
    context = browser.new_context(viewport={"width": 1440, "height": 900})
    context.grant_permissions(["clipboard-read", "clipboard-write"], origin=seeded.url)
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    try:
        broken = seeded.jobs["broken"]
        open_page(page, seeded.url, f"/jobs{broken}", ".page-job[data-loaded]")
        page.click('[data-action="copy-cli"]')
        page.wait_for_selector(".toast.show")
        copied = page.evaluate("navigator.clipboard.readText()")
        assert copied == page.locator("[data-cli]").inner_text()
    finally:
        context.close()
    assert errors == []
    argv = shlex.split(copied)
    assert argv[:3] == ["iris", "job", "run"]
    assert re.search(r"--cpu 250m --memory 64MB", copied)
    env = {**os.environ, "IRIS_CONTROLLER_URL": seeded.url, "USER": "frank", "LOGNAME": "frank"}
    cmd = [sys.executable, "-m", "iris.cli.main", *argv[1:3], "--no-wait", "--json", *argv[3:]]
    cmd[cmd.index("--name") + 1] = "broken-again"
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    original = seeded.client.job(broken).detail().spec
    again_id = re.search(r'"job_id":\s*"([^"]+)"', out.stdout).group(1)  # type: ignore[union-attr]
    again = seeded.client.job(again_id).detail().spec
    assert again.entrypoint == original.entrypoint
    assert again.resources == original.resources
    assert (again.replicas, again.priority, again.env) == (original.replicas, original.priority, original.env)
