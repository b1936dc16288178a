"""Fixtures for the dashboard tests: a real local cluster with jobs in every state, and Debian's
chromium driven by Playwright (never a downloaded browser)."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from tests.conftest import wait_until

from iris.client import Entrypoint, IrisClient, LocalCluster, ResourceSpec
from iris.rpc.enums import JobState

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
SCREENSHOTS = Path(__file__).resolve().parents[2] / "test-artifacts" / "screenshots"
SMALL = ResourceSpec(cpu=0.25, memory="64MB")
# Prints a numbered line every 0.2 s for a minute.
TICKER = ["sh", "-c", "i=0; while [ $i -lt 300 ]; do echo tick $i; i=$((i+1)); sleep 0.2; done"]


@dataclass
class SeededCluster:
    """A running local cluster and the ids of the jobs seeded into it."""

    cluster: LocalCluster
    client: IrisClient
    jobs: dict[str, str] = field(default_factory=dict)
    flag_dir: Path = field(default_factory=Path)

    @property
    def url(self) -> str:
        return self.cluster.url


def _state(client: IrisClient, job_id: str) -> JobState:
    return client.job(job_id).status()


@pytest.fixture(scope="session")
def seeded() -> Iterator[SeededCluster]:
    """Two workers of 2 cpu / 2GB and jobs that succeeded, failed, run, wait and were killed."""
    flag_dir = Path(tempfile.mkdtemp(prefix="iris-dash-flags-"))
    with LocalCluster(workers=2, worker_cpu="2", worker_memory="2GB", tick_s=0.5) as lc:
        client = IrisClient(lc.url)
        s = SeededCluster(lc, client, flag_dir=flag_dir)

        def submit(key: str, argv: list[str], **kw: object) -> str:
            kw.setdefault("resources", SMALL)
            job = client.submit(Entrypoint.from_command(*argv), name=key, **kw)  # type: ignore[arg-type]
            s.jobs[key] = job.job_id
            return job.job_id

        submit("hello", ["echo", "hello from iris"], user="alice")
        submit("broken", ["sh", "-c", "echo about to fail; echo 'model diverged' >&2; exit 3"], user="alice")
        submit("sleeper", ["sleep", "300"], user="bob", replicas=2)
        submit(
            "huge",
            ["true"],
            user="bob",
            resources=ResourceSpec(cpu=64, memory="64MB"),
            wait_for_capacity=True,
        )
        submit("doomed", ["sleep", "300"], user="bob")
        submit("ticker", TICKER, user="carol")
        parent = submit("pipeline", ["sleep", "300"], user="carol")
        wait_until(lambda: _state(client, parent) is JobState.RUNNING, timeout=30, what="parent running")
        child = client.submit(
            Entrypoint.from_command("sleep", "300"), name="stage1", resources=SMALL, parent_job_id=parent
        )
        s.jobs["stage1"] = child.job_id
        wait_until(
            lambda: _state(client, s.jobs["doomed"]) is JobState.RUNNING, timeout=30, what="doomed running"
        )
        client.job(s.jobs["doomed"]).kill()
        for key, want in (
            ("hello", JobState.SUCCEEDED),
            ("broken", JobState.FAILED),
            ("doomed", JobState.KILLED),
            ("sleeper", JobState.RUNNING),
            ("ticker", JobState.RUNNING),
            ("stage1", JobState.RUNNING),
        ):
            wait_until(lambda k=key, w=want: _state(client, s.jobs[k]) is w, timeout=30, what=f"{key} {want}")
        yield s
        client.close()
    shutil.rmtree(flag_dir, ignore_errors=True)


@pytest.fixture(scope="session")
def browser() -> Iterator[object]:
    if not CHROMIUM.exists():
        pytest.skip("Debian's chromium is not installed (apt-get install -y chromium)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, headless=True)
        yield b
        b.close()


class PageErrors:
    """Console errors and uncaught exceptions seen by a page; some 4xx answers can be expected."""

    def __init__(self) -> None:
        self.errors: list[str] = []
        self.allowed: list[str] = []

    def allow(self, fragment: str) -> None:
        self.allowed.append(fragment)

    def unexpected(self) -> list[str]:
        return [e for e in self.errors if not any(a in e for a in self.allowed)]


@pytest.fixture
def page_errors() -> PageErrors:
    return PageErrors()


@pytest.fixture
def page(browser, page_errors: PageErrors) -> Iterator[object]:  # type: ignore[no-untyped-def]
    context = browser.new_context(viewport={"width": 1440, "height": 900})
    p = context.new_page()

    def on_console(msg) -> None:  # type: ignore[no-untyped-def]
        if msg.type == "error":
            loc = msg.location or {}
            page_errors.errors.append(f"console: {msg.text} @ {loc.get('url', '')}")

    p.on("console", on_console)
    p.on("pageerror", lambda exc: page_errors.errors.append(f"pageerror: {exc}"))
    p.set_default_timeout(15_000)
    yield p
    context.close()
    assert page_errors.unexpected() == [], "the page logged errors"


def screenshot(page, name: str) -> Path:  # type: ignore[no-untyped-def]
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    path = SCREENSHOTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    return path


def open_page(page, base_url: str, hash_route: str, loaded_selector: str) -> None:  # type: ignore[no-untyped-def]
    """Navigate to a dashboard route and wait until its data has rendered."""
    page.goto(f"{base_url}/#{hash_route}")
    page.wait_for_selector("body[data-ready]")
    page.wait_for_selector(loaded_selector)


def wait_for_js(page, predicate: str, timeout: float = 10.0) -> None:  # type: ignore[no-untyped-def]
    """Poll a JS predicate from the test side: Playwright's wait_for_function evaluates a string,
    which the dashboard's Content-Security-Policy (no 'unsafe-eval') rightly refuses."""
    expression = predicate if predicate.lstrip().startswith("()") else f"() => ({predicate})"
    wait_until(
        lambda: bool(page.evaluate(expression)), timeout=timeout, what=f"the page to satisfy {predicate}"
    )
