"""An OOM-killed task and a timed-out task each say their own reason: in the API, the CLI and the
dashboard (screenshot: test-artifacts/screenshots/job-failure-*.png)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from tests.conftest import wait_until
from tests.dashboard.conftest import SeededCluster, open_page, screenshot

from iris.client import Entrypoint, JobState, ResourceSpec
from iris.client.job import Job

pytestmark = pytest.mark.browser

HOG = "blob = bytearray(400 * 1000 * 1000)\nimport time\ntime.sleep(30)\n"


def _failed(
    seeded: SeededCluster, name: str, argv: list[str], memory: str, timeout: float | None = None
) -> Job:
    job = seeded.client.submit(
        Entrypoint.from_command(*argv),
        name=name,
        user="frank",
        resources=ResourceSpec(cpu=0.25, memory=memory),
        timeout=timeout,
    )
    detail = job.wait(timeout=60)
    assert detail.state is JobState.FAILED, detail
    return job


def test_oom_and_timeout_say_why_everywhere(page, seeded: SeededCluster) -> None:
    oom = _failed(seeded, "hog", [sys.executable, "-c", HOG], "128MB")
    slow = _failed(seeded, "slow", ["sh", "-c", "echo started; sleep 60"], "64MB", timeout=1.5)

    # API
    oom_failure = oom.detail().tasks[0].failure
    assert oom_failure is not None and oom_failure.kind == "oom"
    assert oom_failure.summary.startswith("OOM-killed at peak ") and oom_failure.summary.endswith(
        "of limit 128MB"
    )
    wait_until(lambda: slow.detail().tasks[0].failure is not None, timeout=10, what="the timeout diagnosed")
    slow_failure = slow.detail().tasks[0].failure
    assert slow_failure is not None and slow_failure.kind == "timeout"
    assert slow_failure.summary == "execution timeout: stopped at its 1.5s limit"
    wait_until(lambda: "started" in (slow.detail().tasks[0].failure.log_tail or []), timeout=10, what="tail")

    # CLI
    env = {**os.environ, "IRIS_CONTROLLER_URL": seeded.url}
    cli = [sys.executable, "-m", "iris.cli.main", "job", "status"]
    oom_text = subprocess.run([*cli, oom.job_id], capture_output=True, text=True, env=env, timeout=60).stdout
    assert "task 0 failed (oom): OOM-killed at peak" in oom_text
    slow_text = subprocess.run(
        [*cli, slow.job_id], capture_output=True, text=True, env=env, timeout=60
    ).stdout
    assert "task 0 failed (timeout): execution timeout: stopped at its 1.5s limit" in slow_text
    assert "FAILED (TIMEOUT)" in slow_text and "exit code: 124" in slow_text
    assert "FAILED (OOM)" in oom_text and "exit code: 137" in oom_text
    assert "    started" in slow_text

    # Dashboard
    for job, kind, name in ((oom, "oom", "job-failure-oom"), (slow, "timeout", "job-failure-timeout")):
        open_page(page, seeded.url, f"/jobs{job.job_id}", ".page-job[data-loaded]")
        block = page.locator(f'.failure[data-kind="{kind}"]')
        block.wait_for()
        text = block.inner_text()
        assert page.locator(f'[data-failure-kind="{kind}"]').inner_text() == kind.upper()
        if kind == "oom":
            assert "out of memory" in text.lower() and "OOM-killed at peak" in text and "limit 128MB" in text
        else:
            assert "timeout (execution time limit)" in text.lower() and "stopped at its 1.5s limit" in text
            assert "started" in block.locator("pre.log-tail").inner_text()
        assert page.locator('tr[data-task-index="0"] .col-info').inner_text().strip() == (
            oom_failure.summary if kind == "oom" else slow_failure.summary
        )
        screenshot(page, name)


def test_log_view_opens_at_the_end_and_loads_earlier(page, seeded: SeededCluster) -> None:
    script = "for i in range(5000):\n    print(f'row {i}')\nprint('\\x1b[32mgreen\\x1b[0m end')\nprint('50%\\r100% done')\n"
    job = seeded.client.submit(
        Entrypoint.from_command(sys.executable, "-c", script),
        name="long-log",
        user="frank",
        resources=ResourceSpec(cpu=0.25, memory="64MB"),
    )
    assert job.wait(timeout=60).state is JobState.SUCCEEDED

    def stored() -> bool:
        tail = job.query_logs(tail=1).lines
        return bool(tail) and tail[-1].line == "50%\r100% done"

    wait_until(stored, timeout=20, what="the whole log stored")
    open_page(page, seeded.url, f"/jobs{job.job_id}/0", ".page-job[data-loaded]")
    page.wait_for_selector(".log-lines .ln >> text=end")
    texts = page.evaluate(
        "() => [...document.querySelectorAll('.log-lines .ln:not(.system) .tx')].map(e => e.textContent)"
    )
    assert "row 0" not in texts and "row 4999" in texts  # it opened at the end
    assert texts[-1] == "100% done"  # a \r progress line collapsed to its last state
    assert page.locator(".log-lines .ansi-fg32").first.inner_text() == "green"
    earlier = page.locator('[data-action="load-earlier"]')
    assert earlier.is_visible()
    earlier.click()
    page.wait_for_function("() => document.querySelectorAll('.log-lines .ln').length >= 2000")
    page.fill('input[name="log-search"]', "row 4321")
    assert page.locator(".log-lines .ln:not([hidden])").count() == 1
    page.press('input[name="log-search"]', "Enter")
    page.wait_for_selector(".search-result")
    assert "1 line matches" in page.locator(".search-result").inner_text()
    screenshot(page, "job-log-search")
