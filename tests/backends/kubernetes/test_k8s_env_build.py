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
    root: Path,
    state: Path,
    uv: str | None,
    *,
    requirements: list[str],
    offline: bool = True,
    seed: Path | None = None,
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
    if seed is not None:
        env["IRIS_ENV_SEED"] = str(seed)
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
def test_an_offline_build_copies_the_operators_seed_cache_into_the_users(tmp_path: Path) -> None:
    """The pre-warmed ``<environment_dir>/.uv-cache`` is shared and read-only; each user's builds
    use a copy (not hard links, which would let one user change the files another's copy reads)."""
    seed = tmp_path / "seed"
    (seed / "archive-v0" / "abc").mkdir(parents=True)
    (seed / "archive-v0" / "abc" / "METADATA").write_text("Name: demo\n")
    (seed / "wheels-v8" / "pypi" / "demo").mkdir(parents=True)
    (seed / "wheels-v8" / "pypi" / "demo" / "1.0-py3-none-any").symlink_to("../../../archive-v0/abc")
    user = tmp_path / "envs" / "users" / "alice"
    (user / ".uv-cache" / "archive-v0" / "abc").mkdir(parents=True)
    (user / ".uv-cache" / "CACHEDIR.TAG").write_text("the user's own\n")
    pod = _build(user, tmp_path / "pod", UV, requirements=[], seed=seed)
    out = pod.communicate(timeout=120)[0]
    assert pod.returncode == 0, out
    copied = user / ".uv-cache" / "archive-v0" / "abc" / "METADATA"
    assert copied.read_text() == "Name: demo\n"
    assert copied.stat().st_ino != (seed / "archive-v0" / "abc" / "METADATA").stat().st_ino  # a copy
    link = user / ".uv-cache" / "wheels-v8" / "pypi" / "demo" / "1.0-py3-none-any"
    assert os.readlink(link) == "../../../archive-v0/abc" and (link / "METADATA").is_file()
    assert (user / ".uv-cache" / "CACHEDIR.TAG").read_text() == "the user's own\n"  # kept
    assert sorted(p.name for p in seed.rglob("*")) == ["1.0-py3-none-any", "METADATA", "abc", "archive-v0",
                                                        "demo", "pypi", "wheels-v8"]  # fmt: skip


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
