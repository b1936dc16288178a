"""The ``real_control_plane`` pytest fixture: one real control plane per test session.

Tests using it carry the ``real_k8s`` marker. Missing binaries FAIL the test with the build
command to run; ``IRIS_SKIP_REAL_K8S=1`` skips instead. ``IRIS_K8S_RUN_DIR=<dir>`` reuses a
control plane started with ``scripts/k8s-control-plane up --run-dir <dir>`` (left running).

The ``real_kubelet_plane`` fixture: a control plane with a real kubelet + containerd node.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from iris.testing.control_plane.binaries import MissingBinaries
from iris.testing.control_plane.cluster import ControlPlane, ControlPlaneOptions, start_control_plane
from iris.testing.control_plane.processes import StartupError
from iris.testing.control_plane.real_node import missing_requirements


@pytest.fixture(scope="session")
def real_control_plane() -> Iterator[ControlPlane]:
    if os.environ.get("IRIS_SKIP_REAL_K8S") == "1":
        pytest.skip("IRIS_SKIP_REAL_K8S=1: real control plane tests skipped on request")
    reuse = os.environ.get("IRIS_K8S_RUN_DIR")
    if reuse:
        yield ControlPlane.load(Path(reuse))
        return
    try:
        cp = start_control_plane(ControlPlaneOptions(tied_to_parent=True))
    except (MissingBinaries, StartupError) as exc:
        pytest.fail(str(exc), pytrace=False)
    try:
        yield cp
    finally:
        cp.stop()


@pytest.fixture(scope="session")
def real_kubelet_plane() -> Iterator[ControlPlane]:
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
        cp = start_control_plane(ControlPlaneOptions(nodes=0, real_node=True, tied_to_parent=True))
    except (MissingBinaries, StartupError) as exc:
        pytest.fail(str(exc), pytrace=False)
    try:
        yield cp
    finally:
        cp.stop()
