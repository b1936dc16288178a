"""A user's grep pattern cannot hold the controller: matching is linear in the line (RE2), and a
pattern it cannot run is a 400 with one sentence."""

from __future__ import annotations

import statistics
import threading
import time
from collections.abc import Iterator

import httpx
import pytest
from tests.conftest import wait_until

from iris.client import IrisClient, LocalCluster
from iris.cluster.controller.logstore.query import compile_user_pattern
from iris.rpc.errors import InvalidArgument
from iris.rpc.models import Entrypoint

HOSTILE = "(a+)+$"  # backtracking engines take ~2^n steps on n a's not followed by the end
LINES = 20_000


def test_a_catastrophic_pattern_is_linear() -> None:
    pattern = compile_user_pattern(HOSTILE)
    started = time.monotonic()
    assert pattern.search("a" * 40 + "!") is None
    assert pattern.search("a" * 100_000) is not None
    assert time.monotonic() - started < 1.0


@pytest.mark.parametrize("pattern", ["(", r"(a)\1", "(?=a)", "a{1000}{1000}", "x" * 300])
def test_a_pattern_that_cannot_run_is_refused_in_one_sentence(pattern: str) -> None:
    with pytest.raises(InvalidArgument) as refused:
        compile_user_pattern(pattern)
    assert "\n" not in str(refused.value) and str(refused.value).startswith("the grep pattern")


@pytest.fixture(scope="module")
def cluster() -> Iterator[LocalCluster]:
    with LocalCluster(workers=1) as lc:
        yield lc


def test_hostile_grep_returns_fast_and_health_answers_meanwhile(cluster: LocalCluster) -> None:
    with IrisClient(cluster.url) as client:
        job = client.submit(
            Entrypoint.from_command("python3", "-c", f"print(('a' * 40 + '!\\n') * {LINES}, end='')"),
            name="aaaa",
            workspace=False,
        )
        job.wait(timeout=120)
    job_id = job.job_id.lstrip("/")
    with IrisClient(cluster.url) as client:  # a bystander, running on the worker meanwhile
        bystander = client.submit(Entrypoint.from_command("sleep", "600"), name="bystander", workspace=False)
        running = wait_until(
            lambda: (t := bystander.detail().tasks[0]).state.value == "RUNNING" and t.current_attempt_uid,
            timeout=60,
            what="the bystander to run",
        )
    with httpx.Client(base_url=cluster.url, timeout=30) as http:
        deadline = time.monotonic() + 60
        while True:  # the worker ships the log a moment after the task ends
            page = http.get(f"/api/v1/jobs/{job_id}:logs", params={"tail": 1}).json()
            if page["lines"] or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        assert page["lines"], "the job's log never reached the controller"

        answers: list[httpx.Response] = []
        took: list[float] = []

        def hostile() -> None:
            with httpx.Client(base_url=cluster.url, timeout=20) as other:
                for _ in range(3):
                    started = time.monotonic()
                    answers.append(other.get(f"/api/v1/jobs/{job_id}:logs", params={"grep": HOSTILE}))
                    took.append(time.monotonic() - started)

        searcher = threading.Thread(target=hostile)
        searcher.start()
        health: list[float] = []
        while searcher.is_alive():
            started = time.monotonic()
            assert http.get("/healthz").status_code == 200
            health.append(time.monotonic() - started)
        searcher.join()
        assert [a.status_code for a in answers] == [200, 200, 200]
        assert answers[0].json()["lines"] == []  # no line ends in an a
        assert max(took) < 10, took
        assert statistics.median(health) < 0.1 and max(health) < 2, health

        # No task was fenced or re-run: the bystander still runs its first attempt.
        with IrisClient(cluster.url) as client:
            task = client.job(bystander.job_id).detail().tasks[0]
            assert (task.state.value, task.current_attempt_uid, task.attempt_count) == ("RUNNING", running, 1)
            client.job(bystander.job_id).kill()

        bad = http.get(f"/api/v1/jobs/{job_id}:logs", params={"grep": r"(a)\1"})
        assert bad.status_code == 400
        assert bad.json()["error"]["message"].startswith("the grep pattern is not a valid regular expression")
