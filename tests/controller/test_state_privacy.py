"""Controller and worker state dirs are their daemon's alone: directories 0700, files 0600 (the
database and its WAL, the log store, keys, bundles), and an install made before is repaired."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

from iris.client import IrisClient, LocalCluster
from iris.cluster.runtime.private_state import make_private
from iris.rpc.models import Entrypoint

# Handed to tasks on purpose (their work dirs and environments), not the daemon's private state.
TASK_DIRS = ("tasks", "work")


def open_to_others(root: Path) -> Iterator[str]:
    """Every path under ``root`` (itself included) that group or others can use, with its mode."""
    for current, dirs, files in os.walk(root):
        if Path(current) != root and Path(current).name in TASK_DIRS and Path(current).parent == root:
            dirs[:] = []
            continue
        for name in [*dirs, *files, *([""] if Path(current) == root else [])]:
            path = Path(current, name)
            info = path.lstat()
            if stat.S_ISLNK(info.st_mode):
                continue
            mode = stat.S_IMODE(info.st_mode)
            allowed = 0o711 if path == root and (root / "tasks").is_dir() else 0o700
            if mode & ~allowed & 0o077:
                yield f"{path} {mode:o}"


def test_make_private_repairs_an_old_install(tmp_path: Path) -> None:
    root = tmp_path / "state"
    (root / "logs").mkdir(parents=True)
    (root / "controller.sqlite3").write_text("db")
    (root / "logs" / "a.log").write_text("log")
    (root / "tool").write_text("#!/bin/sh\n")
    for path, mode in [(root, 0o755), (root / "logs", 0o755), (root / "controller.sqlite3", 0o644),
                       (root / "logs" / "a.log", 0o666), (root / "tool", 0o755)]:  # fmt: skip
        path.chmod(mode)
    make_private(root)
    assert stat.S_IMODE(root.stat().st_mode) == 0o700
    assert stat.S_IMODE((root / "logs").stat().st_mode) == 0o700
    assert stat.S_IMODE((root / "controller.sqlite3").stat().st_mode) == 0o600
    assert stat.S_IMODE((root / "logs" / "a.log").stat().st_mode) == 0o600
    assert stat.S_IMODE((root / "tool").stat().st_mode) == 0o700


def test_a_running_cluster_keeps_its_state_private(tmp_path: Path) -> None:
    state = tmp_path / "cluster"
    controller_dir, worker_dir = state / "controller", state / "workers" / "worker-0"
    # An install from before this change: world-readable directories and files.
    for directory in (controller_dir, worker_dir):
        directory.mkdir(parents=True)
        (directory / "left-from-before").write_text("secret")
        (directory / "left-from-before").chmod(0o644)
        directory.chmod(0o755)
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "main.py").write_text("print('hello from the bundle')\n")
    with LocalCluster(workers=1, state_dir=state) as cluster, IrisClient(cluster.url) as client:
        job = client.submit(
            Entrypoint.from_command("python3", "main.py"), name="private", workspace=workspace
        )
        assert job.wait(timeout=120).state.value == "SUCCEEDED"
        # The database, its WAL/SHM, the log store and the bundle exist now: all private.
        assert list(controller_dir.glob("controller.sqlite3*")), list(controller_dir.iterdir())
        assert [p for p in (controller_dir / "bundles").rglob("*") if p.is_file()]
        assert list(open_to_others(controller_dir)) == []
        assert list(open_to_others(worker_dir)) == []
        assert stat.S_IMODE((controller_dir / "left-from-before").stat().st_mode) == 0o600
        assert stat.S_IMODE((worker_dir / "left-from-before").stat().st_mode) == 0o600
