"""A controller without tokens cannot be driven by a web page: writes only as JSON, only under its
own host names, never framed, never shared cross-origin; a local cluster can require a one-time
token that its workers and tasks keep working with."""

from __future__ import annotations

import json
from collections.abc import Iterator

import httpx
import pytest

from iris.client import IrisClient, LocalCluster
from iris.rpc.models import Entrypoint

JOB = {"name": "forged", "entrypoint": {"kind": "command", "argv": ["true"]}}


@pytest.fixture(scope="module")
def open_cluster() -> Iterator[LocalCluster]:
    with LocalCluster(workers=0) as lc:
        yield lc


@pytest.fixture
def http(open_cluster: LocalCluster) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=open_cluster.url, timeout=30) as client:
        yield client


@pytest.mark.parametrize(
    ("content_type", "path"),
    [
        ("text/plain", "/api/v1/jobs"),  # what a plain form (enctype=text/plain) or fetch no-cors sends
        ("application/x-www-form-urlencoded", "/api/v1/jobs"),
        ("multipart/form-data; boundary=x", "/api/v1/jobs"),
        (None, "/api/v1/jobs/nobody/job:stop"),
    ],
)
def test_a_write_a_page_could_forge_is_415(http: httpx.Client, content_type: str | None, path: str) -> None:
    headers = {"content-type": content_type} if content_type else {}
    body = json.dumps(JOB).encode() if content_type else None
    answer = http.post(path, content=body, headers=headers)
    assert answer.status_code == 415
    message = answer.json()["error"]["message"]
    assert "application/json" in message and "\n" not in message
    assert http.get("/api/v1/jobs", params={"name": "forged"}).json()["jobs"] == []


def test_json_writes_and_the_client_still_work(open_cluster: LocalCluster, http: httpx.Client) -> None:
    answer = http.post("/api/v1/dry-run", json=JOB)
    assert answer.status_code == 200, answer.text
    with IrisClient(open_cluster.url) as client:  # body-less POSTs (stop) say JSON too
        job = client.submit(Entrypoint.from_command("true"), name="kept", workspace=False)
        job.kill()


@pytest.mark.parametrize("host", ["attacker.example", "attacker.example:{port}", "127.0.0.1.nip.io:{port}"])
def test_a_foreign_host_name_is_refused(open_cluster: LocalCluster, http: httpx.Client, host: str) -> None:
    port = open_cluster.url.rsplit(":", 1)[1]
    answer = http.get("/api/v1/jobs", headers={"host": host.format(port=port)})
    assert answer.status_code == 421
    assert "does not answer to the host name" in answer.json()["error"]["message"]
    assert http.get("/", headers={"host": host.format(port=port)}).status_code == 421  # the dashboard too


@pytest.mark.parametrize("host", ["localhost:{port}", "127.0.0.1:{port}", "[::1]:{port}", "localhost"])
def test_loopback_names_work(open_cluster: LocalCluster, http: httpx.Client, host: str) -> None:
    port = open_cluster.url.rsplit(":", 1)[1]
    assert http.get("/api/v1/jobs", headers={"host": host.format(port=port)}).status_code == 200


def test_no_other_origin_may_read_or_frame(http: httpx.Client) -> None:
    for answer in (
        http.get("/api/v1/jobs", headers={"origin": "https://attacker.example"}),
        http.options("/api/v1/jobs", headers={"origin": "https://attacker.example",
                                               "access-control-request-method": "POST"}),
        http.get("/"),
    ):  # fmt: skip
        assert "access-control-allow-origin" not in answer.headers
        assert answer.headers["x-frame-options"] == "DENY"
        assert "frame-ancestors 'none'" in answer.headers["content-security-policy"]


def test_a_one_time_token_guards_a_local_cluster() -> None:
    with LocalCluster(workers=1, one_time_token=True) as lc:
        assert lc.token and lc.dashboard_url == f"{lc.url}/?token={lc.token}"
        with httpx.Client(base_url=lc.url, timeout=30) as http:
            assert http.get("/api/v1/jobs").status_code == 401
            assert http.post("/api/v1/jobs", json=JOB).status_code == 401
        # The workers authenticate with their own token, and a task's client with its job token.
        with IrisClient(lc.url, token=lc.token) as client:
            job = client.submit(
                Entrypoint.from_command("python3", "-c", "from iris.client import iris_ctx; print(iris_ctx().client.job(iris_ctx().job_id).status().value)"),
                name="inside",
                workspace=False,
            )  # fmt: skip
            assert job.wait(timeout=120).state.value == "SUCCEEDED"
            assert [line.line for line in job.log_lines() if line.stream == "stdout"] == ["RUNNING"]
