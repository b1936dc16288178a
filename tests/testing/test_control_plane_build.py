"""``ensure_built``: a cache missing the build stamp is built (here: only the stamp, every binary
already there) by one caller while a second waits on the lock, both with progress lines."""

from __future__ import annotations

import fcntl
import threading
from pathlib import Path

import pytest
from tests.conftest import wait_until

from iris.testing.control_plane.binaries import MissingBinaries, bin_dir, require_binaries
from iris.testing.control_plane.build import ensure_built


def test_a_missing_build_is_made_once_while_the_other_caller_waits(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = ensure_built(lambda line: None)  # the machine's own cache (.ci/run builds it first)
    monkeypatch.delenv("IRIS_K8S_BIN_DIR", raising=False)
    monkeypatch.setenv("IRIS_K8S_CACHE", str(tmp_path))
    folder = bin_dir()
    folder.mkdir(parents=True)
    for binary in real.iterdir():
        if not binary.name.startswith("."):
            (folder / binary.name).symlink_to(binary)
    with pytest.raises(MissingBinaries, match="build stamp"):
        require_binaries()

    progress: dict[str, list[str]] = {"a": [], "b": []}
    results: dict[str, Path] = {}
    lock = (tmp_path / "k8s-build.lock").open("w")
    fcntl.flock(lock, fcntl.LOCK_EX)  # someone else's build is under way

    def call(name: str) -> None:
        results[name] = ensure_built(progress[name].append)

    first = threading.Thread(target=call, args=("a",))
    first.start()
    try:
        wait_until(lambda: progress["a"], timeout=30, what="the waiting message")
        assert progress["a"] == [
            f"waiting for another build of the Kubernetes control plane in {tmp_path} to finish"
        ]
    finally:
        lock.close()  # that build ends (without a result): the waiter builds
    first.join(timeout=120)
    assert not first.is_alive()
    assert results["a"] == folder and (folder / ".complete").is_file()
    assert any(line.startswith("building the Kubernetes control plane") for line in progress["a"])
    assert any("built control plane" in line for line in progress["a"]), progress["a"]
    call("b")  # complete now: no build, no progress
    assert results["b"] == folder and progress["b"] == []
