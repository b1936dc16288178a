"""The test engine and images: a private dockerd starts, runs a test image, and stops cleanly."""

from __future__ import annotations

import json
import os
import subprocess
import tarfile
from pathlib import Path

import pytest

from iris.testing import container_engine, images

pytestmark = pytest.mark.skipif(not container_engine.available(), reason="dockerd is not installed")


def _mounts_under(*roots: Path) -> list[str]:
    found = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        point = line.split()[4]
        if any(point.startswith(str(root) + "/") or point == str(root) for root in roots):
            found.append(point)
    return found


def test_archive_is_both_docker_and_oci_layout() -> None:
    archive = images.image_archive(images.BUSYBOX_IMAGE)
    with tarfile.open(archive) as tar:
        names = set(tar.getnames())
        manifest = json.load(tar.extractfile("manifest.json"))  # type: ignore[arg-type]
        index = json.load(tar.extractfile("index.json"))  # type: ignore[arg-type]
    assert {"oci-layout", "index.json", "manifest.json"} <= names
    assert manifest[0]["RepoTags"] == [images.BUSYBOX_IMAGE]
    assert manifest[0]["Config"] in names and manifest[0]["Layers"][0] in names
    assert (
        index["manifests"][0]["annotations"]["io.containerd.image.name"]
        == "docker.io/" + images.BUSYBOX_IMAGE
    )
    # Cached by inputs: the second call is the same file.
    assert images.image_archive(images.BUSYBOX_IMAGE) == archive


def test_private_engine_runs_an_image_and_stops_without_leftovers(tmp_path: Path) -> None:
    paths = container_engine.EnginePaths(data_root=tmp_path / "data", run_dir=tmp_path / "run")
    engine = container_engine.up(paths)
    try:
        assert engine.started
        container_engine.load_images(engine, (images.BUSYBOX_IMAGE,))
        env = {**os.environ, **engine.env()}
        ran = subprocess.run(
            [
                container_engine.docker_cli(),
                "run",
                "--rm",
                "--network",
                "host",
                images.BUSYBOX_IMAGE,
                "sh",
                "-c",
                "ulimit -n; exit 3",
            ],
            capture_output=True,
            text=True,
            env=env,
            timeout=60,
        )
        assert ran.returncode == 3, ran.stderr
        assert ran.stdout.strip() == "20000"
        # Reused, not started twice.
        assert not container_engine.up(paths).started
    finally:
        container_engine.down(engine)
    assert not container_engine.ping(paths)
    assert engine.supervisor is not None and engine.supervisor.poll() is not None
    assert _mounts_under(paths.data_root, paths.run_dir) == []
    assert not paths.socket.exists()
