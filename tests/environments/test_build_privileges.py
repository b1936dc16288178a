"""An environment build runs a job's build code: never as root, never with the worker's token, in a
directory no other user can write; local paths are refused before anything is built."""

from __future__ import annotations

import os
import shutil
import stat
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from pydantic import ValidationError

from iris.cluster.runtime.isolation import Isolation
from iris.cluster.worker.environments import (
    READY_MARKER,
    EnvironmentBuilder,
    ProjectFiles,
    processes_of,
    seal,
)
from iris.rpc.models import EnvironmentSpec, is_local_requirement

WORKER_TOKEN = "worker-token-a-build-must-not-see"

# Stands in for uv (no network): the "install" step reports who runs it, with what environment,
# and how the directory it installs into is protected; it also leaves a daemon behind.
FAKE_UV = """#!/bin/sh
if [ "$1" = venv ]; then
    for last; do :; done
    mkdir -p "$last/lib/python{version}/site-packages" "$last/bin"
    exit 0
fi
if [ "$1" = sync ]; then  # the project environment: uv sync of the workspace's lock
    echo "sync-uid=$(id -u)"
    echo "sync-dir=$(stat -c %a:%u "$UV_PROJECT_ENVIRONMENT")"
    env | sed 's/^/sync-env:/'
    exit 0
fi
env_dir=$(dirname "$(dirname "$5")")
echo "uid=$(id -u)"
echo "dir=$(stat -c %a:%u "$env_dir")"
env | sed 's/^/env:/'
touch "$env_dir/lib/python{version}/site-packages/planted.py"
setsid sleep 300 < /dev/null > /dev/null 2>&1 &
"""


@pytest.mark.parametrize(
    "requirement", ["/tmp/tree", "./tree", "tree/", "../tree", "~/tree", "file:///tmp/tree", "pkg @ file:///x",
                    "pkg @ ./tree", "dist/pkg-1.0.tar.gz", "pkg-1.0-py3-none-any.whl"],
)  # fmt: skip
def test_a_local_requirement_is_refused_with_one_sentence(requirement: str) -> None:
    assert is_local_requirement(requirement)
    with pytest.raises(ValidationError) as refused:
        EnvironmentSpec(pip_packages=["numpy", requirement])
    message = str(refused.value.errors()[0]["msg"])
    assert "is a local path" in message and "\n" not in message


@pytest.mark.parametrize(
    "requirement", ["numpy", "numpy==2.1", "requests[socks]>=2; python_version>'3.8'", "zope.interface",
                    "pkg @ https://example.com/pkg-1.0.tar.gz", "git+https://github.com/a/b"],
)  # fmt: skip
def test_names_and_remote_urls_are_accepted(requirement: str) -> None:
    assert not is_local_requirement(requirement)
    assert EnvironmentSpec(pip_packages=[requirement]).pip_packages == [requirement]


@pytest.fixture
def scratch() -> Iterator[Path]:
    """A directory task uids can traverse (pytest's own tmp dirs are 0700 root)."""
    path = Path(tempfile.mkdtemp(prefix="iris-build-priv-"))
    path.chmod(0o711)
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.mark.skipif(os.geteuid() != 0, reason="uid switching needs a root worker (CI runs as root)")
def test_a_build_runs_as_a_task_uid_without_the_worker_token(
    scratch: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    isolation = Isolation.detect(scratch, (310_000, 310_049))
    if isolation is None:
        pytest.skip("unshare/setpriv/mount missing: this root worker could not isolate attempts")
    monkeypatch.setenv("IRIS_TOKEN", WORKER_TOKEN)
    uv = scratch / "fake-uv"
    uv.write_text(FAKE_UV.format(version=f"{sys.version_info.major}.{sys.version_info.minor}"))
    uv.chmod(0o755)
    envs = scratch / "envs"
    builder = EnvironmentBuilder(envs, uv=["/bin/sh", str(uv)], isolation=isolation)
    log: list[str] = []
    built = builder.ensure(["anything==1.0"], log=log.append)

    said = [line.removeprefix("uv: ") for line in log if line.startswith("uv: ")]
    uid = int(next(line for line in said if line.startswith("uid=")).removeprefix("uid="))
    assert 310_000 <= uid <= 310_049
    # While it built, the environment was the build's own and closed to everyone else.
    assert next(line for line in said if line.startswith("dir=")) == f"dir=700:{uid}"
    environment = "\n".join(line for line in said if line.startswith("env:"))
    assert WORKER_TOKEN not in environment and "IRIS_" not in environment
    # Afterwards: nothing of that uid runs any more, and the environment is root's, read-only to others.
    assert processes_of(uid) == []
    for path in [built.path, *built.path.rglob("*")]:
        info = path.lstat()
        assert info.st_uid == 0, path
        assert not info.st_mode & (stat.S_IWGRP | stat.S_IWOTH), path
    assert (built.path / READY_MARKER).exists()
    assert not list(envs.glob(".cache-*"))  # the build's private cache is gone


@pytest.mark.skipif(os.geteuid() != 0, reason="uid switching needs a root worker (CI runs as root)")
def test_a_project_environment_is_synced_as_a_task_uid_without_the_worker_token(
    scratch: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``uv sync`` of a workspace's lock runs its packages' build code too: the same rules."""
    isolation = Isolation.detect(scratch, (310_050, 310_099))
    if isolation is None:
        pytest.skip("unshare/setpriv/mount missing: this root worker could not isolate attempts")
    monkeypatch.setenv("IRIS_TOKEN", WORKER_TOKEN)
    uv = scratch / "fake-uv"
    uv.write_text(FAKE_UV.format(version=f"{sys.version_info.major}.{sys.version_info.minor}"))
    uv.chmod(0o755)
    builder = EnvironmentBuilder(scratch / "envs", uv=["/bin/sh", str(uv)], isolation=isolation)
    log: list[str] = []
    project = ProjectFiles(b"[project]\nname = 'p'\nversion = '1'\n", b"version = 1\n")
    built = builder.ensure([], project=project, log=log.append)

    said = [line.removeprefix("uv: ") for line in log if line.startswith("uv: ")]
    uid = int(next(line for line in said if line.startswith("sync-uid=")).removeprefix("sync-uid="))
    assert 310_050 <= uid <= 310_099
    assert next(line for line in said if line.startswith("sync-dir=")) == f"sync-dir=700:{uid}"
    environment = "\n".join(line for line in said if line.startswith("sync-env:"))
    assert WORKER_TOKEN not in environment and "IRIS_" not in environment
    assert processes_of(uid) == []
    assert all(p.lstat().st_uid == 0 for p in [built.path, *built.path.rglob("*")])


@pytest.mark.skipif(os.geteuid() != 0, reason="files of several owners need root")
def test_sealing_never_publishes_a_hard_link_to_a_file_the_build_did_not_own(tmp_path: Path) -> None:
    """Where the kernel lets a uid hard-link files it does not own (fs.protected_hardlinks=0), a
    build could link /etc/shadow into its environment; sealing must not make that readable."""
    builder = 310_123
    private = tmp_path / "shadow"
    private.write_text("root's secret")
    private.chmod(0o600)
    env = tmp_path / "env"
    (env / "lib").mkdir(parents=True)
    (env / "lib" / "mod.py").write_text("x = 1\n")
    os.link(private, env / "lib" / "data.txt")  # what the build would have done
    for path in (env, env / "lib", env / "lib" / "mod.py"):
        os.chown(path, builder, builder)
    seal(env, builder)
    assert stat.S_IMODE(private.stat().st_mode) == 0o600 and private.stat().st_nlink == 1
    assert not (env / "lib" / "data.txt").exists()
    assert (env / "lib" / "mod.py").stat().st_uid == 0 and (
        env / "lib" / "mod.py"
    ).stat().st_mode & 0o444 == 0o444
