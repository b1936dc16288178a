"""Bearer tokens from the cluster config: who may submit, see, stop, and register workers."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from tests.conftest import wait_until
from tests.e2e.secure_cluster import IRIS, cluster_config, secure_cluster

from iris.client import Entrypoint, IrisClient, JobState, LocalCluster, ResourceSpec, iris_ctx
from iris.rpc.errors import AlreadyExists, FailedPrecondition, NotFound, PermissionDenied, Unauthenticated

SMALL = ResourceSpec(cpu=0.5, memory="64MB")


@pytest.fixture(scope="module")
def secure(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with secure_cluster(tmp_path_factory.mktemp("auth"), "secure") as cluster:
        yield cluster


def spawn_child() -> None:
    ctx = iris_ctx()
    ctx.client.submit(
        Entrypoint.from_command("true"), name="child", resources=ResourceSpec(cpu=0.5, memory="64MB")
    )
    time.sleep(600)


def test_no_token_is_401_but_health_is_open(secure: LocalCluster) -> None:
    resp = httpx.get(f"{secure.url}/api/v1/jobs")
    assert resp.status_code == 401 and "token" in resp.json()["error"]["message"]
    assert (
        httpx.get(f"{secure.url}/api/v1/jobs", headers={"authorization": "Bearer wrong"}).status_code == 401
    )
    assert httpx.get(f"{secure.url}/healthz").status_code == 200
    with pytest.raises(Unauthenticated):
        IrisClient(secure.url).list_jobs()


def test_users_see_and_stop_only_their_own_jobs(secure: LocalCluster) -> None:
    alice, bob, admin = (
        IrisClient(secure.url, token=t) for t in ("alice-token-123", "bob-token-12345", "admin-token-123")
    )
    job = alice.submit(
        Entrypoint.from_command("sleep", "600"), name="private", resources=SMALL, user="mallory"
    )
    assert job.job_id == "/alice/private"  # a user's job is always theirs, whatever the spec says
    wait_until(lambda: job.status() is JobState.RUNNING, timeout=60, what="alice's job running")
    assert [j.job_id for j in bob.list_jobs().jobs] == []
    with pytest.raises(NotFound):
        bob.job(job.job_id).detail()
    with pytest.raises(NotFound):
        bob.job(job.job_id).wait(timeout=5)  # a wait is refused up front, not held
    with pytest.raises(NotFound):
        bob.job(job.job_id).kill()
    assert job.job_id in {j.job_id for j in admin.list_jobs().jobs}
    assert alice.job(job.job_id).kill() is JobState.KILLED


def test_a_task_submits_sub_jobs_with_its_own_job_token(secure: LocalCluster) -> None:
    alice = IrisClient(secure.url, token="alice-token-123")
    parent = alice.submit(Entrypoint.from_callable(spawn_child), name="parent", resources=SMALL)
    child = wait_until(
        lambda: next(iter(parent.detail().children), None), timeout=60, what="child submitted by the task"
    )
    assert child == "/alice/parent/child"
    assert alice.job(child).wait(timeout=60).state is JobState.SUCCEEDED
    parent.kill()


def test_only_worker_tokens_register_workers(secure: LocalCluster) -> None:
    body = {"worker_id": "intruder", "address": "127.0.0.1:9", "capacity": {"cpu": 1, "memory": "1GB"}}
    user = httpx.post(
        f"{secure.url}/api/v1/workers/register",
        json=body,
        headers={"authorization": "Bearer alice-token-123"},
    )
    assert user.status_code == 403
    with pytest.raises(PermissionDenied):
        IrisClient(secure.url, token="worker-token-123").list_jobs()
    workers = IrisClient(secure.url, token="admin-token-123").workers().workers
    assert [w.worker_id for w in workers] == ["worker-0"]  # the daemon registered with its worker token


def test_cli_uses_iris_token(secure: LocalCluster) -> None:
    env = {**os.environ, "IRIS_CONTROLLER_URL": secure.url}
    denied = subprocess.run([*IRIS, "job", "list"], capture_output=True, text=True, env=env)
    assert denied.returncode == 1 and "token" in denied.stderr and "Traceback" not in denied.stderr
    ok = subprocess.run(
        [*IRIS, "job", "list", "--json"],
        capture_output=True,
        text=True,
        env={**env, "IRIS_TOKEN": "bob-token-12345"},
    )
    assert ok.returncode == 0 and json.loads(ok.stdout)["jobs"] == []


def test_cluster_start_with_auth_runs_jobs_for_token_holders(tmp_path: Path) -> None:
    config = tmp_path / "cluster.yaml"
    config.write_text(cluster_config(tmp_path / "state", "secure"))
    proc = subprocess.Popen(
        [*IRIS, "cluster", "start", "--local", "--config", str(config), "--workers", "1"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        url = next(line.split("controller:")[1].strip() for line in proc.stdout if "controller:" in line)
        env = {**os.environ, "IRIS_CONTROLLER_URL": url}
        ran = subprocess.run(
            [*IRIS, "job", "run", "--no-workspace", "--", "echo", "authed"],
            capture_output=True, text=True, env={**env, "IRIS_TOKEN": "alice-token-123"}, timeout=120,
        )  # fmt: skip
        assert ran.returncode == 0, ran.stderr
        assert ran.stdout.strip() == "authed"
        denied = subprocess.run([*IRIS, "job", "list"], capture_output=True, text=True, env=env, timeout=60)
        assert denied.returncode == 1 and "needs a token" in denied.stderr
    finally:
        proc.send_signal(2)
        proc.wait(timeout=60)


def test_a_batch_submit_is_checked_like_single_submits(secure: LocalCluster) -> None:
    alice = IrisClient(secure.url, token="alice-token-123")
    bob = IrisClient(secure.url, token="bob-token-12345")
    specs = [
        alice.build_spec(Entrypoint.from_command("true"), name=f"batch-{i}", resources=SMALL, user="mallory")
        for i in range(2)
    ]
    jobs = alice.submit_many(specs)
    assert [j.job_id for j in jobs] == [
        "/alice/batch-0",
        "/alice/batch-1",
    ]  # the caller's, whatever the spec says
    for job in jobs:
        assert job.wait(timeout=60).state is JobState.SUCCEEDED
    # A sub-job of someone else's job is refused as it is for a single submit.
    child = bob.build_spec(
        Entrypoint.from_command("true"), name="sneaky", resources=SMALL, parent_job_id="/alice/batch-0"
    )
    with pytest.raises(NotFound):
        bob.submit_many([child])


def test_scheduler_and_workers_show_a_user_only_their_own_tasks(secure: LocalCluster) -> None:
    alice, bob, admin = (
        IrisClient(secure.url, token=t) for t in ("alice-token-123", "bob-token-12345", "admin-token-123")
    )
    running = alice.submit(Entrypoint.from_command("sleep", "600"), name="secret-run", resources=SMALL)
    waiting = alice.submit(
        Entrypoint.from_command("true"),
        name="secret-wait",
        resources=ResourceSpec(cpu=64, memory="64MB"),
        wait_for_capacity=True,
    )
    try:
        wait_until(lambda: running.status() is JobState.RUNNING, timeout=60, what="alice's job running")

        def queued(client: IrisClient) -> list[str]:
            bands = client.http.request("GET", "/api/v1/scheduler")["bands"]
            return [e["job_id"] for entries in bands.values() for e in entries]

        def on_workers(client: IrisClient) -> list[str]:
            return [t for w in client.workers().workers for t in w.running_tasks]

        wait_until(lambda: waiting.job_id in queued(admin), timeout=60, what="alice's job queued")
        assert waiting.job_id in queued(alice)
        assert [j for j in queued(bob) if j.startswith("/alice/")] == []  # no name, no id of hers
        assert f"{running.job_id}/0" in on_workers(admin)
        assert f"{running.job_id}/0" in on_workers(alice)
        assert [t for t in on_workers(bob) if t.startswith("/alice/")] == []
        assert "secret" not in json.dumps(bob.http.request("GET", "/api/v1/workers"))
    finally:
        running.kill()
        waiting.kill()


def test_a_job_token_reaches_its_own_job_only_and_dies_with_it(secure: LocalCluster) -> None:
    alice = IrisClient(secure.url, token="alice-token-123")
    other = alice.submit(Entrypoint.from_command("sleep", "600"), name="other", resources=SMALL)
    leaker = alice.submit(
        Entrypoint.from_command("sh", "-c", 'echo "$IRIS_TOKEN"; sleep 600'), name="leaker", resources=SMALL
    )
    token = wait_until(
        lambda: next((line for line in leaker.logs() if line.startswith("iris-job.")), None),
        timeout=60,
        what="the task's job token in its log",
    )
    stolen = IrisClient(secure.url, token=token)
    assert stolen.job(leaker.job_id).status() is JobState.RUNNING
    assert [j.job_id for j in stolen.list_jobs().jobs] == [leaker.job_id]
    with pytest.raises(NotFound):
        stolen.job(other.job_id).kill()
    with pytest.raises(PermissionDenied):
        stolen.submit(Entrypoint.from_command("true"), name="escape", resources=SMALL)
    assert leaker.kill() is JobState.KILLED
    with pytest.raises(Unauthenticated):
        stolen.job(leaker.job_id).status()
    other.kill()


def test_a_user_reads_only_bundles_of_their_own_jobs(secure: LocalCluster) -> None:
    data = os.urandom(2048)
    sha = hashlib.sha256(data).hexdigest()
    url = f"{secure.url}/api/v1/bundles/{sha}"
    alice, bob, admin = (
        {"authorization": f"Bearer {t}"} for t in ("alice-token-123", "bob-token-12345", "admin-token-123")
    )
    assert httpx.put(url, content=data, headers=alice).status_code == 201
    job = IrisClient(secure.url, token="alice-token-123").submit(
        Entrypoint.from_command("true"),
        name="bundled",
        resources=ResourceSpec(cpu=64, memory="64MB"),
        wait_for_capacity=True,
        bundle_id=sha,
    )
    try:
        assert httpx.get(url, headers=alice).content == data
        assert httpx.get(url, headers=admin).content == data
        refused = httpx.get(url, headers=bob)
        assert refused.status_code == 404 and refused.content != data
    finally:
        job.kill()


def test_a_replaced_runs_job_token_is_refused(secure: LocalCluster) -> None:
    alice = IrisClient(secure.url, token="alice-token-123")
    leak = 'echo "$IRIS_TOKEN"; sleep 600'

    def leaked_token(job, unlike: str = "") -> str:  # noqa: ANN001
        return wait_until(
            lambda: next((x for x in job.logs() if x.startswith("iris-job.") and x != unlike), None),
            timeout=60,
            what="the task's job token in its log",
        )

    first = alice.submit(Entrypoint.from_command("sh", "-c", leak), name="rerun", resources=SMALL)
    old_token = leaked_token(first)
    assert first.kill() is JobState.KILLED

    def resubmit():  # noqa: ANN202
        try:
            return alice.submit(
                Entrypoint.from_command("sh", "-c", leak), name="rerun", resources=SMALL, replace=True
            )
        except AlreadyExists:  # the first run is still stopping its task
            return None

    second = wait_until(resubmit, timeout=60, what="the job replaced")
    try:
        new_token = leaked_token(second, unlike=old_token)  # the job id's log keeps the first run's
        with pytest.raises(Unauthenticated, match="earlier run"):
            IrisClient(secure.url, token=old_token).job(second.job_id).kill()
        assert IrisClient(secure.url, token=new_token).job(second.job_id).status() is JobState.RUNNING
    finally:
        second.kill()


def test_a_bundle_is_readable_and_usable_by_its_uploader_only(secure: LocalCluster) -> None:
    data, missing = os.urandom(2048), os.urandom(2048)
    sha, missing_sha = hashlib.sha256(data).hexdigest(), hashlib.sha256(missing).hexdigest()
    url = f"{secure.url}/api/v1/bundles/{sha}"
    alice, bob, admin, worker = (
        {"authorization": f"Bearer {t}"}
        for t in ("alice-token-123", "bob-token-12345", "admin-token-123", "worker-token-123")
    )
    assert httpx.put(url, content=data, headers=alice).status_code == 201
    # Before any job names it: the uploader, admins and workers read it; bob cannot tell it exists.
    assert httpx.get(url, headers=alice).content == data
    assert httpx.get(url, headers=admin).content == data and httpx.get(url, headers=worker).content == data
    foreign, absent = (
        httpx.head(url, headers=bob),
        httpx.head(f"{secure.url}/api/v1/bundles/{missing_sha}", headers=bob),
    )
    assert (foreign.status_code, foreign.headers.get("content-length")) == (
        404,
        absent.headers.get("content-length"),
    )
    assert absent.status_code == 404 and httpx.get(url, headers=bob).status_code == 404
    # Naming alice's bundle in bob's job is refused as a missing bundle is.
    bob_client = IrisClient(secure.url, token="bob-token-12345")
    for bundle in (sha, missing_sha):
        with pytest.raises(FailedPrecondition, match="never uploaded"):
            bob_client.submit(
                Entrypoint.from_command("true"),
                name="thief",
                resources=SMALL,
                bundle_id=bundle,
                wait_for_capacity=True,
            )
    # Uploading the same bytes makes them bob's too (201: new to him, whoever else has them).
    assert httpx.put(url, content=data, headers=bob).status_code == 201
    assert httpx.put(url, content=data, headers=bob).status_code == 200
    assert httpx.head(url, headers=bob).status_code == 200


def test_only_admins_cordon_workers(secure: LocalCluster) -> None:
    for action in ("cordon", "drain", "uncordon"):
        resp = httpx.post(
            f"{secure.url}/api/v1/workers/worker-0:{action}",
            json={"reason": "x"},
            headers={"authorization": "Bearer alice-token-123"},
        )
        assert resp.status_code == 403 and "admin" in resp.json()["error"]["message"]
    admin = {"authorization": "Bearer admin-token-123"}
    assert (
        httpx.post(f"{secure.url}/api/v1/workers/worker-0:cordon", json={}, headers=admin).status_code == 204
    )
    assert httpx.post(f"{secure.url}/api/v1/workers/worker-0:uncordon", headers=admin).status_code == 204
