"""The ``real_control_plane`` pytest fixture: one real control plane per test session.

Tests using it carry the ``real_k8s`` marker. Missing binaries are built first
(``scripts/k8s-control-plane build``, under a lock so parallel sessions wait, progress on the
terminal); a machine that cannot build them (no Go, no checkout) FAILS the test with the reason.
``IRIS_SKIP_REAL_K8S=1`` skips instead. ``IRIS_K8S_RUN_DIR=<dir>`` reuses a
control plane started with ``scripts/k8s-control-plane up --run-dir <dir>`` (left running).

The ``real_kubelet_plane`` fixture: a control plane with a real kubelet + containerd node.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from iris.testing.control_plane.binaries import MissingBinaries
from iris.testing.control_plane.build import ensure_built
from iris.testing.control_plane.cluster import ControlPlane, ControlPlaneOptions, start_control_plane
from iris.testing.control_plane.processes import StartupError
from iris.testing.control_plane.real_node import missing_requirements


@pytest.fixture(scope="session")
def real_control_plane(pytestconfig: pytest.Config) -> Iterator[ControlPlane]:
    if os.environ.get("IRIS_SKIP_REAL_K8S") == "1":
        pytest.skip("IRIS_SKIP_REAL_K8S=1: real control plane tests skipped on request")
    reuse = os.environ.get("IRIS_K8S_RUN_DIR")
    if reuse:
        yield ControlPlane.load(Path(reuse))
        return
    try:
        _build_if_missing(pytestconfig)
        cp = start_control_plane(ControlPlaneOptions(tied_to_parent=True))
    except (MissingBinaries, StartupError) as exc:
        pytest.fail(str(exc), pytrace=False)
    try:
        yield cp
    finally:
        cp.stop()


def _build_if_missing(config: pytest.Config) -> None:
    """Build the binaries when the cache lacks them, printing progress past pytest's capture."""
    capture = config.pluginmanager.getplugin("capturemanager")
    reporter = config.pluginmanager.getplugin("terminalreporter")

    def progress(line: str) -> None:
        with capture.global_and_fixture_disabled() if capture is not None else contextlib.nullcontext():
            if reporter is not None:
                reporter.write_line(f"[real_control_plane] {line}")
            else:
                print(f"[real_control_plane] {line}", flush=True)

    ensure_built(progress)


@pytest.fixture(scope="session")
def real_kubelet_plane(pytestconfig: pytest.Config) -> Iterator[ControlPlane]:
    """A second control plane whose only node is a real kubelet with containerd (real_node.py):
    tests carry the ``real_kubelet`` marker. Not root: skipped (a real node needs root); root but
    containerd, runc or the CNI plugins missing: the test FAILS naming them (``.ci/run`` installs them)."""
    if os.environ.get("IRIS_SKIP_REAL_K8S") == "1":
        pytest.skip("IRIS_SKIP_REAL_K8S=1: real control plane tests skipped on request")
    if os.geteuid() != 0:
        pytest.skip("a real kubelet node needs root")
    missing = missing_requirements()
    if missing:
        pytest.fail(f"a real kubelet node needs: {', '.join(missing)} (see .ci/run)", pytrace=False)
    try:
        _build_if_missing(pytestconfig)
        cp = start_control_plane(ControlPlaneOptions(nodes=0, real_node=True, tied_to_parent=True))
    except (MissingBinaries, StartupError) as exc:
        pytest.fail(str(exc), pytrace=False)
    try:
        yield cp
    finally:
        cp.stop()
