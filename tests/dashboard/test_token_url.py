"""The dashboard of a local cluster with a one-time token: opened through the URL that
`iris cluster start --local` prints, it keeps the token and shows the cluster without asking."""

from __future__ import annotations

import pytest
from tests.dashboard.conftest import screenshot, wait_for_js

from iris.client import Entrypoint, IrisClient, LocalCluster

pytestmark = pytest.mark.browser


def test_the_token_url_opens_the_dashboard_and_keeps_the_token(page) -> None:  # type: ignore[no-untyped-def]
    with LocalCluster(workers=1, one_time_token=True) as lc:
        with IrisClient(lc.url, token=lc.token) as client:
            job = client.submit(Entrypoint.from_command("echo", "hi"), name="token-url", workspace=False)
            job.wait(timeout=120)
        prompts: list[str] = []
        page.on("dialog", lambda dialog: (prompts.append(dialog.message), dialog.dismiss()))
        page.goto(lc.dashboard_url)
        page.wait_for_selector("body[data-ready]")
        page.wait_for_selector(".page-jobs[data-loaded]")
        page.wait_for_selector("text=token-url")
        assert prompts == [], "the page asked for a token it was given"
        assert "token=" not in page.url  # taken out of the address bar (history, screenshots)
        wait_for_js(page, f"localStorage.getItem('iris_token') === {lc.token!r}")
        screenshot(page, "dashboard-token-url")
        page.reload()  # the stored token is sent from then on
        page.wait_for_selector("text=token-url")
        assert prompts == []
        page.goto("about:blank")  # stop polling before the cluster stops
