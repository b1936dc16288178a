"""Build the control plane's binaries when the cache lacks them, once per machine at a time.

``ensure_built(progress)`` returns the bin folder at once when it is complete; otherwise it takes
a file lock in the cache (parallel test sessions and ``iris cluster start`` wait for whichever
started first), runs ``scripts/k8s-control-plane build`` with its output passed to ``progress``
line by line, and checks the result.
"""

from __future__ import annotations

import fcntl
import os
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from iris.testing.control_plane.binaries import MissingBinaries, cache_root, repo_root, require_binaries

Progress = Callable[[str], None]


def ensure_built(progress: Progress) -> Path:
    """The bin folder, built first if missing; MissingBinaries when it cannot be built here."""
    try:
        return require_binaries()
    except MissingBinaries as missing:
        if os.environ.get("IRIS_K8S_BIN_DIR"):  # a folder of the user's own: nothing to build there
            raise
        root = repo_root()
        if root is None:
            raise MissingBinaries(f"{missing} (and no source checkout to build from)") from None
    cache = cache_root()
    cache.mkdir(parents=True, exist_ok=True)
    with (cache / "k8s-build.lock").open("w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            progress(f"waiting for another build of the Kubernetes control plane in {cache} to finish")
            fcntl.flock(lock, fcntl.LOCK_EX)
        try:  # built by whoever held the lock before us?
            return require_binaries()
        except MissingBinaries:
            pass
        progress(
            "building the Kubernetes control plane from its pinned Go modules "
            "(scripts/k8s-control-plane build; first time only, several minutes)"
        )
        started = time.monotonic()
        proc = subprocess.Popen(
            [str(root / "scripts" / "k8s-control-plane"), "build"],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            text=True,
        )
        assert proc.stdout is not None
        for line in proc.stdout:
            progress(line.rstrip("\n"))
        if proc.wait() != 0:
            raise MissingBinaries(
                f"scripts/k8s-control-plane build failed (exit {proc.returncode}); its output is above"
            )
        folder = require_binaries()
        progress(f"control plane built in {time.monotonic() - started:.0f}s")
        return folder
