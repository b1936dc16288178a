"""The worker's bundle cache against real HTTP servers: download once under concurrency, verify the
hash, refuse unsafe archives, and explain failures in one sentence."""

from __future__ import annotations

import hashlib
import http.server
import io
import tarfile
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from iris.client import LocalCluster
from iris.client.workspace import build_bundle, upload_bundle
from iris.cluster.worker.build_lock import Cancelled, hash_lock
from iris.cluster.worker.bundles import BundleCache, BundleError


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with LocalCluster(workers=0, state_dir=tmp_path_factory.mktemp("cluster")) as c:
        yield c


def uploaded_workspace(cluster: LocalCluster, root: Path) -> str:
    (root / "pkg").mkdir(parents=True)
    (root / "train.py").write_text("import pkg.mod\n")
    (root / "pkg" / "mod.py").write_text("VALUE = 42\n")
    bundle = build_bundle(root)
    upload_bundle(cluster.url, bundle)
    return bundle.bundle_id


def test_concurrent_fetches_download_once_then_unpack(cluster: LocalCluster, tmp_path: Path) -> None:
    sha = uploaded_workspace(cluster, tmp_path / "ws")
    cache = BundleCache(tmp_path / "worker" / "bundles", cluster.url)
    logs: list[str] = []
    lock = threading.Lock()

    def log(line: str) -> None:
        with lock:
            logs.append(line)

    start = threading.Barrier(6)
    paths: list[Path] = []

    def fetch() -> None:
        start.wait()
        paths.append(cache.fetch(sha, log=log))

    threads = [threading.Thread(target=fetch) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert len(paths) == 6 and len(set(paths)) == 1
    assert sum(1 for line in logs if line.startswith("fetched bundle")) == 1
    assert hashlib.sha256(paths[0].read_bytes()).hexdigest() == sha
    dest = tmp_path / "work"
    dest.mkdir()
    assert cache.unpack(sha, paths[0], dest) == 2
    assert (dest / "pkg" / "mod.py").read_text() == "VALUE = 42\n"


def test_missing_bundle_is_a_clear_error(cluster: LocalCluster, tmp_path: Path) -> None:
    cache = BundleCache(tmp_path / "bundles", cluster.url)
    with pytest.raises(BundleError, match=r"^could not fetch bundle 0{64} from .*HTTP 404"):
        cache.fetch("0" * 64)
    assert list((tmp_path / "bundles").glob("*.tar.gz")) == []


def test_unreachable_controller_is_a_clear_error(tmp_path: Path) -> None:
    cache = BundleCache(tmp_path / "bundles", "http://127.0.0.1:1")
    with pytest.raises(BundleError, match="could not fetch bundle"):
        cache.fetch("a" * 64)


class _LyingHandler(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        body = b"not the bytes you asked for"
        self.send_response(200)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


def test_corrupt_download_is_rejected_and_not_cached(tmp_path: Path) -> None:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _LyingHandler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        cache = BundleCache(tmp_path / "bundles", f"http://127.0.0.1:{server.server_address[1]}")
        with pytest.raises(BundleError, match="hash to"):
            cache.fetch("b" * 64)
    finally:
        server.shutdown()
        server.server_close()
    assert [p.name for p in (tmp_path / "bundles").iterdir() if not p.name.endswith(".lock")] == []


def test_unpack_refuses_paths_outside_the_work_dir(tmp_path: Path) -> None:
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w:gz") as tar:
        info = tarfile.TarInfo("../escaped.txt")
        info.size = 3
        tar.addfile(info, io.BytesIO(b"bad"))
    archive = tmp_path / "evil.tar.gz"
    archive.write_bytes(raw.getvalue())
    dest = tmp_path / "work"
    dest.mkdir()
    cache = BundleCache(tmp_path / "bundles", "http://127.0.0.1:1")
    with pytest.raises(BundleError, match="could not unpack bundle"):
        cache.unpack("c" * 64, archive, dest)
    assert not (tmp_path / "escaped.txt").exists()


def test_cache_keeps_only_the_most_recent_bundles(cluster: LocalCluster, tmp_path: Path) -> None:
    cache = BundleCache(tmp_path / "bundles", cluster.url, keep=2)
    ids = []
    for i in range(3):
        root = tmp_path / f"ws{i}"
        root.mkdir()
        (root / "f.txt").write_text(f"version {i}\n")
        bundle = build_bundle(root)
        upload_bundle(cluster.url, bundle)
        cache.fetch(bundle.bundle_id)
        ids.append(bundle.bundle_id)
    assert {p.name for p in (tmp_path / "bundles").glob("*.tar.gz")} == {f"{i}.tar.gz" for i in ids[1:]}


def test_a_waiter_gives_up_when_its_attempt_is_stopped(tmp_path: Path) -> None:
    lock_path = tmp_path / "x.lock"
    stop = threading.Event()
    with hash_lock(lock_path):
        threading.Timer(0.2, stop.set).start()
        with pytest.raises(Cancelled), hash_lock(lock_path, stop.is_set):
            pass
