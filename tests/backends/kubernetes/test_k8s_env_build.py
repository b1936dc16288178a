"""The build-env init container's script, run as real processes with real uv on this host (no pod,
no network): pods starting together on one node build an environment once, a build uv refuses
ends with ``environment: ...`` and uv's words as its last line, and an image without uv says so."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from iris.cluster.backends.kubernetes.environment import BUILD_SCRIPT
from iris.cluster.worker.environments import uv_binary

UV = uv_binary()
needs_uv = pytest.mark.skipif(UV is None, reason="no uv binary on this host")


def _build(
    root: Path, state: Path, uv: str | None, *, requirements: list[str], offline: bool = True
) -> subprocess.Popen[str]:
    state.mkdir(parents=True)
    env = {
        "PATH": os.defpath,
        "IRIS_ENV_ROOT": str(root),
        "IRIS_ENV_STATE": str(state),
        "IRIS_ENV_REQUIREMENTS": json.dumps(requirements),
        "IRIS_ENV_OFFLINE": "1" if offline else "0",
        "IRIS_NODE_NAME": "n0",
        "IRIS_ENV_UV": uv or "",
    }
    return subprocess.Popen(
        [sys.executable, "-c", BUILD_SCRIPT],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


@needs_uv
def test_pods_starting_together_on_a_node_build_once(tmp_path: Path) -> None:
    root = tmp_path / "envs"
    pods = [_build(root, tmp_path / f"pod{i}", UV, requirements=[]) for i in range(3)]
    outputs = [p.communicate(timeout=120)[0] for p in pods]
    assert [p.returncode for p in pods] == [0, 0, 0], outputs
    built = [out for out in outputs if "building environment" in out]
    assert len(built) == 1, outputs
    key = next(line.split()[2] for line in built[0].splitlines() if line.startswith("building environment"))
    for i, out in enumerate(outputs):
        if out is not built[0]:
            assert f"reusing environment {key} on n0" in out, out
        assert (tmp_path / f"pod{i}" / "path").read_text() == str(root / key)  # what the task enters
        assert (tmp_path / f"pod{i}" / "log").read_text().splitlines() == out.splitlines()
    assert (root / key / ".iris-ready").is_file()
    assert (root / key / "bin" / "python").exists()


@needs_uv
def test_a_build_uv_refuses_ends_with_its_words(tmp_path: Path) -> None:
    pod = _build(tmp_path / "envs", tmp_path / "pod", UV, requirements=["iris-no-such-package-xyz"])
    out = pod.communicate(timeout=120)[0]
    assert pod.returncode == 1
    last = out.strip().splitlines()[-1]
    assert last.startswith("environment: installing iris-no-such-package-xyz failed (uv exited with code"), (
        out
    )
    assert "iris-no-such-package-xyz" in last.split("):", 1)[1], out  # uv's own error line
    assert not list((tmp_path / "envs").glob("*/.iris-ready"))


def test_an_image_without_uv_says_so(tmp_path: Path) -> None:
    pod = _build(tmp_path / "envs", tmp_path / "pod", "/nonexistent/uv", requirements=["pyjokes"])
    out = pod.communicate(timeout=60)[0]
    assert pod.returncode == 1
    assert (
        out.strip()
        .splitlines()[-1]
        .startswith("environment: cannot build the job's environment: uv is not in")
    ), out


@needs_uv
def test_a_node_directory_it_cannot_write_is_named(tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("")
    pod = _build(blocker / "envs", tmp_path / "pod", UV, requirements=[])
    out = pod.communicate(timeout=60)[0]
    assert pod.returncode == 1
    last = out.strip().splitlines()[-1]
    assert last.startswith(
        f"environment: cannot write the node's environment directory {blocker / 'envs'}"
    ), out
    assert last.endswith("it must be writable by the pods' uid"), out
