"""The controller's bundle store: the HTTP routes on a real controller process, upload-once, the size
limit, sub-jobs inheriting their parent's bundle, and garbage collection from housekeeping."""

from __future__ import annotations

import hashlib
import os
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from iris.client import Entrypoint, IrisClient, LocalCluster
from iris.client.workspace import WorkspaceTooLarge, build_bundle
from iris.cluster.controller import store
from iris.cluster.controller.backend import BackendDescriptor, BackendKind
from iris.cluster.controller.bundles import BundleStore, bundles_to_delete
from iris.cluster.controller.controller import create_controller
from iris.rpc.enums import TERMINAL_JOB_STATES
from iris.rpc.errors import FailedPrecondition, InvalidArgument
from iris.rpc.models import JobSpec

HOUR = 3600.0


@pytest.mark.parametrize(
    ("stored", "referenced", "now", "doomed"),
    [
        ([("a", 0.0)], set(), HOUR, ["a"]),  # unreferenced, an hour old
        ([("a", 0.0)], set(), HOUR - 1, []),  # not old enough
        ([("a", 0.0)], {"a"}, 10 * HOUR, []),  # a live job still names it
        ([("a", 0.0), ("b", 0.0), ("c", 5 * HOUR)], {"b"}, 5.5 * HOUR, ["a"]),
        ([], {"a"}, HOUR, []),
    ],
)
def test_bundles_to_delete(
    stored: list[tuple[str, float]], referenced: set[str], now: float, doomed: list[str]
) -> None:
    assert bundles_to_delete(stored, referenced, now) == doomed


def test_store_checks_hash_and_id(tmp_path: Path) -> None:
    bundles = BundleStore(tmp_path / "b")
    data = b"some archive"
    sha = hashlib.sha256(data).hexdigest()
    with pytest.raises(InvalidArgument, match="hash to"):
        bundles.put(sha, b"other bytes")
    with pytest.raises(InvalidArgument, match="not a bundle id"):
        bundles.put("../../etc/passwd", data)
    assert not bundles.exists(sha)
    assert bundles.put(sha, data) is True
    assert bundles.put(sha, data) is False
    assert (tmp_path / "b" / f"{sha}.tar.gz").read_bytes() == data


# ---------------------------------------------------------------- over HTTP, real processes


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with LocalCluster(workers=0, state_dir=tmp_path_factory.mktemp("cluster")) as c:
        yield c


def bundle_dir(cluster: LocalCluster) -> Path:
    return cluster.state_dir / "controller" / "bundles"


def test_routes_head_put_get(cluster: LocalCluster) -> None:
    data = os.urandom(4096)
    sha = hashlib.sha256(data).hexdigest()
    url = f"{cluster.url}/api/v1/bundles/{sha}"
    # As the client uploads (a controller without tokens takes no untyped writes).
    with httpx.Client(timeout=10, headers={"content-type": "application/gzip"}) as http:
        assert http.head(url).status_code == 404
        mismatch = http.put(url, content=data + b"tampered")
        assert mismatch.status_code == 400
        assert "hash to" in mismatch.json()["error"]["message"]
        assert http.head(url).status_code == 404
        assert http.put(url, content=data).status_code == 201
        assert http.put(url, content=data).status_code == 200  # already there
        assert http.head(url).status_code == 200
        got = http.get(url)
        assert got.status_code == 200 and got.content == data
        assert http.get(f"{cluster.url}/api/v1/bundles/not-a-sha").status_code == 400
    assert (bundle_dir(cluster) / f"{sha}.tar.gz").read_bytes() == data


def test_same_workspace_is_uploaded_once(
    cluster: LocalCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "train.py").write_text("print('hi')\n")
    puts: list[str] = []
    real_put = httpx.Client.put

    def counting_put(self: httpx.Client, url: str, **kwargs: object) -> httpx.Response:
        puts.append(str(url))
        return real_put(self, url, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(httpx.Client, "put", counting_put)
    with IrisClient(cluster.url) as client:
        first = client.submit(Entrypoint.from_command("true"), workspace=tmp_path)
        second = client.submit(Entrypoint.from_command("true"), workspace=tmp_path)
        spec_a = client.job(first.job_id).detail().spec
        spec_b = client.job(second.job_id).detail().spec
        for job in (first, second):
            job.kill()
    expected = build_bundle(tmp_path).bundle_id
    assert spec_a.bundle_id == spec_b.bundle_id == expected
    assert len(puts) == 1
    assert (bundle_dir(cluster) / f"{expected}.tar.gz").exists()


def test_too_big_workspace_uploads_nothing(
    cluster: LocalCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "weights.bin").write_bytes(os.urandom(20_000))
    monkeypatch.setenv("IRIS_MAX_BUNDLE_BYTES", "10kB")
    before = set(os.listdir(bundle_dir(cluster))) if bundle_dir(cluster).exists() else set()
    with IrisClient(cluster.url) as client:
        jobs_before = client.list_jobs().total
        with pytest.raises(WorkspaceTooLarge, match=r"weights\.bin"):
            client.submit(Entrypoint.from_command("true"), name="too-big", workspace=tmp_path)
        assert client.list_jobs().total == jobs_before
    after = set(os.listdir(bundle_dir(cluster))) if bundle_dir(cluster).exists() else set()
    assert after == before


def test_unknown_bundle_is_refused_at_submit(cluster: LocalCluster) -> None:
    with IrisClient(cluster.url) as client, pytest.raises(FailedPrecondition, match="never uploaded"):
        client.submit(Entrypoint.from_command("true"), bundle_id="0" * 64)


# ---------------------------------------------------------------- in-process controller


class FakeClock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


def stored_bundle(controller: object, payload: bytes) -> str:
    sha = hashlib.sha256(payload).hexdigest()
    controller.bundles.put(sha, payload)  # type: ignore[attr-defined]
    return sha


def test_sub_job_inherits_the_parents_bundle(tmp_path: Path) -> None:
    controller = create_controller(
        BackendDescriptor(backend_id="w", kind=BackendKind.WORKER), state_dir=tmp_path
    )
    try:
        sha = stored_bundle(controller, b"parent workspace")
        parent = controller.submit(
            JobSpec(name="parent", entrypoint=Entrypoint.from_command("true"), bundle_id=sha), user="alice"
        )
        child = controller.submit(
            JobSpec(name="child", entrypoint=Entrypoint.from_command("true"), parent_job_id=parent)
        )
        other = stored_bundle(controller, b"its own workspace")
        own = controller.submit(
            JobSpec(
                name="own", entrypoint=Entrypoint.from_command("true"), parent_job_id=parent, bundle_id=other
            )
        )
        with controller.db.read() as cur:
            specs = {j: JobSpec.model_validate_json(store.get_job(cur, j).spec_json) for j in (child, own)}  # type: ignore[union-attr]
        assert specs[child].bundle_id == sha
        assert specs[own].bundle_id == other
    finally:
        controller.db.close()


def test_housekeeping_collects_unreferenced_old_bundles(tmp_path: Path) -> None:
    clock = FakeClock()
    controller = create_controller(
        BackendDescriptor(backend_id="w", kind=BackendKind.WORKER), state_dir=tmp_path, clock=clock
    )
    try:
        live = stored_bundle(controller, b"used by a pending job")
        orphan = stored_bundle(controller, b"nobody uses this")
        fresh = stored_bundle(controller, b"just uploaded")
        job = controller.submit(
            JobSpec(name="j", entrypoint=Entrypoint.from_command("true"), bundle_id=live), user="alice"
        )
        old = time.time() - 2 * HOUR  # ages are wall time, like the files' mtimes
        for sha in (live, orphan):
            os.utime(controller.bundles.path(sha), (old, old))
        controller.run_round()
        present = {sha for sha, _ in controller.bundles.stored()}
        assert present == {live, fresh}, "only the unreferenced old bundle goes"

        assert controller.stop_job(job) in TERMINAL_JOB_STATES
        os.utime(controller.bundles.path(live), (old, old))
        clock.now += 10  # within the minute: collection does not run again yet
        controller.run_round()
        assert live in {sha for sha, _ in controller.bundles.stored()}
        clock.now += 61
        controller.run_round()
        assert {sha for sha, _ in controller.bundles.stored()} == {fresh}
    finally:
        controller.db.close()
