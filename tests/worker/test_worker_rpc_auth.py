"""Only the controller drives a worker: every call but /healthz must carry the controller's signature."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.worker.harness import ControllerStub, WorkerProcess, start_worker, wait_until

from iris.rpc.enums import TaskState
from iris.rpc.models import DesiredAttempt, Entrypoint, ReconcileRequest, ResourceSpec, RunSpec
from iris.rpc.signing import RequestVerifier, sign_request, worker_secret

JSON = {"content-type": "application/json"}


@pytest.fixture
def controller() -> Iterator[ControllerStub]:
    stub = ControllerStub().start()
    yield stub
    stub.stop()


@pytest.fixture
def worker(tmp_path: Path, controller: ControllerStub) -> Iterator[WorkerProcess]:
    proc = start_worker(tmp_path, controller.url, "--reregister-after", "30")
    yield proc
    proc.stop()


def reconcile_body(worker: WorkerProcess, uid: str, *argv: str) -> bytes:
    spec = RunSpec(
        attempt_uid=uid,
        attempt_number=0,
        job_id="/mallory/x",
        task_id="/mallory/x/0",
        task_index=0,
        entrypoint=Entrypoint.from_command(*argv),
        resources=ResourceSpec(cpu=1, memory="1GB"),
    )
    request = ReconcileRequest(
        worker_id=worker.worker_id, attempts=[DesiredAttempt(attempt_uid=uid, intent="run", spec=spec)]
    )
    return request.model_dump_json().encode()


def test_forged_reconcile_from_another_process_is_refused_and_runs_nothing(
    worker: WorkerProcess, tmp_path: Path
) -> None:
    marker = tmp_path / "pwned"
    body = reconcile_body(worker, "evil", "touch", str(marker))
    victim_body = reconcile_body(worker, "victim", "sleep", "100")
    assert worker.http.post("/reconcile", content=victim_body, headers=JSON).status_code == 200
    # Another local process, knowing the address but not the secret, forges a reconcile
    # (and an empty desired set, which would otherwise kill every task on the worker).
    forger = (
        "import json, sys, httpx\n"
        "url, body, worker_id = sys.argv[1], sys.argv[2].encode(), sys.argv[3]\n"
        "empty = json.dumps({'worker_id': worker_id, 'attempts': []}).encode()\n"
        "for content in (body, empty):\n"
        "    r = httpx.post(url + '/reconcile', content=content, headers={'content-type': 'application/json'})\n"
        "    print(r.status_code, r.json()['error']['code'])\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", forger, f"http://{worker.address}", body.decode(), worker.worker_id],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert out.stdout.split("\n")[:2] == ["401 unauthenticated", "401 unauthenticated"]
    assert not marker.exists()
    # The forged empty desired set killed nothing.
    victim = worker.observe([DesiredAttempt(attempt_uid="victim", intent="run", spec=None)], "victim")
    assert victim.state is TaskState.RUNNING
    # The same body, signed by the controller, does run: the refusal was the signature's doing.
    signed = worker.http.post("/reconcile", content=body, headers=JSON)
    assert signed.status_code == 200
    wait_until(marker.exists, what="the signed command to run")


def test_unsigned_forgery_does_not_run_its_command(worker: WorkerProcess, tmp_path: Path) -> None:
    marker = tmp_path / "never"
    body = reconcile_body(worker, "evil2", "touch", str(marker))
    answer = worker.stranger.post("/reconcile", content=body, headers=JSON)
    assert answer.status_code == 401
    # Nothing was started: a signed observation of that uid says the worker never heard of it.
    seen = worker.reconcile([DesiredAttempt(attempt_uid="evil2", intent="run", spec=None)])
    assert seen.observations[0].state is TaskState.MISSING
    assert not marker.exists()


def test_replayed_signed_request_is_refused(worker: WorkerProcess) -> None:
    body = ReconcileRequest(worker_id=worker.worker_id, attempts=[]).model_dump_json().encode()
    headers = {**JSON, **sign_request(worker.secret, "POST", "/reconcile", body)}
    first = worker.stranger.post("/reconcile", content=body, headers=headers)
    assert first.status_code == 200
    again = worker.stranger.post("/reconcile", content=body, headers=headers)
    assert again.status_code == 401 and "replay" in again.json()["error"]["message"]


def test_signature_binds_body_path_and_time(worker: WorkerProcess) -> None:
    body = ReconcileRequest(worker_id=worker.worker_id, attempts=[]).model_dump_json().encode()
    headers = {**JSON, **sign_request(worker.secret, "POST", "/reconcile", body)}
    tampered = worker.stranger.post("/reconcile", content=body.replace(b"[]", b"[ ]"), headers=headers)
    assert tampered.status_code == 401
    elsewhere = sign_request(worker.secret, "GET", "/attempts/a/logs", None)
    moved = worker.stranger.get("/attempts/b/logs", headers=elsewhere)
    assert moved.status_code == 401
    stale = {**JSON, **sign_request(worker.secret, "POST", "/reconcile", body, now=time.time() - 3600)}
    old = worker.stranger.post("/reconcile", content=body, headers=stale)
    assert old.status_code == 401 and "clock" in old.json()["error"]["message"]
    wrong_key = {**JSON, **sign_request(b"k" * 32, "POST", "/reconcile", body)}
    assert worker.stranger.post("/reconcile", content=body, headers=wrong_key).status_code == 401


def test_only_json_bodies_are_accepted(worker: WorkerProcess) -> None:
    body = ReconcileRequest(worker_id=worker.worker_id, attempts=[]).model_dump_json().encode()
    # What a browser page can send without a preflight: text/plain, no custom headers.
    plain = worker.stranger.post("/reconcile", content=body, headers={"content-type": "text/plain"})
    assert plain.status_code == 401
    signed_plain = {"content-type": "text/plain", **sign_request(worker.secret, "POST", "/reconcile", body)}
    answer = worker.stranger.post("/reconcile", content=body, headers=signed_plain)
    assert answer.status_code == 415 and answer.json()["error"]["code"] == "unsupported_media_type"
    form = worker.http.post(
        "/attempts/x/exec", content=b"argv=id", headers={"content-type": "application/x-www-form-urlencoded"}
    )
    assert form.status_code == 415


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/attempts/a1/logs"),
        ("GET", "/attempts/a1/status"),
        ("POST", "/attempts/a1/exec"),
        ("POST", "/metrics"),
        ("GET", "/no/such/route"),
        ("DELETE", "/reconcile"),
    ],
)
def test_every_route_but_the_probes_needs_the_signature(
    worker: WorkerProcess, method: str, path: str
) -> None:
    answer = worker.stranger.request(method, path, content=b'{"argv": ["env"]}', headers=JSON)
    assert answer.status_code == 401
    assert worker.stranger.get("/healthz").status_code == 200
    assert b"iris_worker_running_attempts" in worker.stranger.get("/metrics").content


def test_bodies_are_bounded(worker: WorkerProcess) -> None:
    huge = b"[" + b" " * (2 * 1024 * 1024) + b"]"
    answer = worker.http.post("/attempts/a1/exec", content=huge, headers=JSON)
    assert answer.status_code == 413


def test_a_worker_that_never_registered_obeys_nobody(tmp_path: Path) -> None:
    down = ControllerStub().start()
    url = down.url
    down.stop()
    proc = start_worker(tmp_path, url, wait_registered=False)
    try:
        answer = proc.http.get("/attempts/a/status")
        assert answer.status_code == 401 and "registered" in answer.json()["error"]["message"]
    finally:
        proc.stop()


def test_verifier_keeps_the_previous_secret_and_bounds_its_nonces() -> None:
    verifier = RequestVerifier(max_nonces=2)
    old, new = worker_secret(b"m" * 32, "a:1"), worker_secret(b"n" * 32, "a:1")
    verifier.set_secret(old)
    verifier.set_secret(new)
    now = time.time()
    for secret in (old, new):
        headers = sign_request(secret, "GET", "/x", None, now=now)
        assert verifier.verify("GET", "/x", headers, b"", now=now) is None
    third = sign_request(new, "GET", "/x", None, now=now)
    assert verifier.verify("GET", "/x", third, b"", now=now) == "too many requests inside the replay window"
    # Once the first two have left the window they are forgotten and room is made.
    later = now + verifier.window_s * 2 + 1
    fresh = sign_request(new, "GET", "/x", None, now=later)
    assert verifier.verify("GET", "/x", fresh, b"", now=later) is None


def test_signing_client_reaches_the_worker(worker: WorkerProcess) -> None:
    """The controller's own client (WorkerRpcClient) signs what it sends."""
    from tests.worker.harness import STUB_MASTER_KEY

    from iris.cluster.backends.worker_daemon import WorkerRpcClient

    client = WorkerRpcClient(master_key=STUB_MASTER_KEY)
    unsigned = WorkerRpcClient()
    try:
        request = ReconcileRequest(worker_id=worker.worker_id, attempts=[])
        (ok,) = client.reconcile_many({worker.worker_id: (worker.address, request)})
        assert ok.response is not None and ok.error is None
        (refused,) = unsigned.reconcile_many({worker.worker_id: (worker.address, request)})
        assert refused.response is None and refused.error is not None and "signature" in refused.error
        with pytest.raises(Exception) as info:
            client.read_logs(worker.address, "nothing-here")
        assert "nothing-here" in str(info.value)
        with pytest.raises(Exception) as denied:
            unsigned.read_logs(worker.address, "nothing-here")
        assert "signed" in str(denied.value)
    finally:
        client.close()
        unsigned.close()


def test_worker_errors_have_the_controllers_shape(worker: WorkerProcess) -> None:
    """One error shape for both servers (iris/rpc/http_errors.py): routing and validation errors too."""
    missing = worker.http.get("/no/such/route")
    assert missing.status_code == 404
    assert missing.json() == {"error": {"code": "not_found", "message": "no such API path"}}
    bad = worker.http.get("/attempts/a1/logs", params={"limit": "0"})
    assert bad.status_code == 400
    error = bad.json()["error"]
    assert error["code"] == "invalid_argument" and error["message"].startswith("invalid request: limit: ")
