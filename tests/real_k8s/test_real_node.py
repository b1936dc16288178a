"""The real node's teardown leaves nothing behind: no processes, mounts, network namespace, veth,
cgroups, routes, iptables rules or containers. It starts its own control plane with a real node (the
session's ``real_kubelet_plane`` lives until the end), runs a container, then stops everything:
~30 s on a loaded machine, the one test that proves the host is left as it was found."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from iris.testing.control_plane.cluster import ControlPlaneOptions, start_control_plane
from iris.testing.control_plane.real_node import PRIVATE_DIRS, missing_requirements

pytestmark = pytest.mark.real_kubelet


def _iptables() -> set[str]:
    out = subprocess.run(["iptables-save"], capture_output=True, text=True, check=False).stdout
    return {line for line in out.splitlines() if line and not line.startswith(("#", ":"))}


def _processes_mentioning(text: str) -> list[str]:
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            cgroups = (proc / "cgroup").read_text()
        except OSError:
            continue
        if text in cmdline or text in cgroups:
            found.append(f"{proc.name}: {cmdline[:120]}")
    return found


def _route_to(cidr: str) -> str:
    return subprocess.run(["ip", "route", "show", cidr], capture_output=True, text=True).stdout


def _host_files() -> set[str]:
    """What the kubelet and containerd would write on the host whatever their configuration."""
    return {str(p) for d in PRIVATE_DIRS if Path(d).is_dir() for p in Path(d).rglob("*")}


def test_teardown_leaves_no_trace() -> None:
    if os.environ.get("IRIS_SKIP_REAL_K8S") == "1":
        pytest.skip("IRIS_SKIP_REAL_K8S=1")
    if os.geteuid() != 0:
        pytest.skip("a real kubelet node needs root")
    assert not missing_requirements(), missing_requirements()
    rules_before = _iptables()
    files_before = _host_files()
    cp = start_control_plane(ControlPlaneOptions(nodes=0, real_node=True, tied_to_parent=True))
    try:
        node = cp.real_node
        assert node is not None
        cp.kubectl(
            "run", "t", "--image=iris-test/busybox:1", "--restart=Never", "--", "sh", "-c", "sleep 300"
        )
        deadline = time.monotonic() + 60
        while cp.kubectl("get", "pod", "t", "-o", "jsonpath={.status.phase}").stdout != "Running":
            assert time.monotonic() < deadline, cp.kubectl("describe", "pod", "t").stdout[-1500:]
            time.sleep(0.2)
        assert _processes_mentioning(node["cgroup_root"]), "the container runs in the node's cgroups"
        runtime = cp.kubectl(
            "get", "node", node["name"], "-o", "jsonpath={.status.nodeInfo.containerRuntimeVersion}"
        )
        assert runtime.stdout.startswith("containerd://")
        # Pods reach the node IP (a local controller) through the host's route to their CIDR.
        assert node["host_if"] in _route_to(node["pod_cidr"])
    finally:
        cp.stop()
    run_dir = str(cp.run_dir)
    assert not _processes_mentioning(run_dir), _processes_mentioning(run_dir)
    assert not _processes_mentioning(node["cgroup_root"]), _processes_mentioning(node["cgroup_root"])
    mounts = Path("/proc/self/mountinfo").read_text()
    assert run_dir not in mounts and node["netns"] not in mounts
    netns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert node["netns"] not in netns
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
    assert node["host_if"] not in links
    assert not _route_to(node["pod_cidr"]).strip()
    assert not any(
        Path(h, node["cgroup_root"].lstrip("/")).exists() for h in Path("/sys/fs/cgroup").iterdir()
    )
    assert _host_files() <= files_before, _host_files() - files_before
    added = _iptables() - rules_before
    assert not added, added
    assert not Path(run_dir).exists()
