"""Building job environments with uv for real (pyjokes from the package index): built once under
concurrency, reused, Iris importable inside, failures carry uv's output."""

from __future__ import annotations

import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from iris.cluster.worker.build_lock import Cancelled, hash_lock
from iris.cluster.worker.environments import (
    READY_MARKER,
    EnvironmentBuilder,
    EnvironmentBuildError,
    environment_hash,
    find_uv,
    normalized_requirements,
)

PACKAGE = "pyjokes"  # tiny, pure Python, and not installed in the project's own environment
NETWORK_HINTS = ("failed to fetch", "dns error", "could not connect", "error sending request", "timed out")


@pytest.mark.parametrize(
    ("given", "normal"),
    [
        (["b", "a"], ("a", "b")),
        ([" a ", "a", ""], ("a",)),
        (["numpy==2.0", "art>=6"], ("art>=6", "numpy==2.0")),
        ([], ()),
    ],
)
def test_normalized_requirements(given: list[str], normal: tuple[str, ...]) -> None:
    assert normalized_requirements(given) == normal


def test_hash_ignores_order_but_not_python_or_content() -> None:
    assert environment_hash(["a", "b"], "py1") == environment_hash(["b", "a", "a"], "py1")
    assert environment_hash(["a"], "py1") != environment_hash(["a"], "py2")
    assert environment_hash(["a"], "py1") != environment_hash(["a==1"], "py1")
    assert len(environment_hash([], "py")) == 16


def test_not_in_the_project_environment() -> None:
    probe = subprocess.run([sys.executable, "-c", f"import {PACKAGE}"], capture_output=True)
    assert probe.returncode != 0, f"{PACKAGE} is installed in the project venv: the tests would prove nothing"


@pytest.fixture(scope="module")
def envs_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    if find_uv() is None:
        pytest.fail("uv is not installed: the worker needs it to build environments")
    yield tmp_path_factory.mktemp("envs")


def test_concurrent_tasks_build_once_and_iris_is_importable(envs_dir: Path) -> None:
    builder = EnvironmentBuilder(envs_dir)
    logs: list[list[str]] = [[] for _ in range(4)]
    errors: list[BaseException] = []
    barrier = threading.Barrier(4)

    def build(i: int) -> None:
        barrier.wait()
        try:
            builder.ensure([PACKAGE], log=logs[i].append)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=build, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(180)
    if errors:
        text = "\n".join(line for log in logs for line in log).lower() + str(errors[0]).lower()
        if any(hint in text for hint in NETWORK_HINTS):
            pytest.skip(f"the package index is unreachable: {errors[0]}")
        raise errors[0]
    all_lines = [line for log in logs for line in log]
    env_hash = builder.hash_of([PACKAGE])
    assert sum(1 for line in all_lines if line.startswith(f"building environment {env_hash}")) == 1
    assert sum(1 for line in all_lines if line.startswith(f"reusing environment {env_hash}")) == 3
    assert any(f"+ {PACKAGE}==" in line for line in all_lines)  # uv's output reached the task log
    python = envs_dir / env_hash / "bin" / "python"
    probe = subprocess.run(
        [
            str(python),
            "-c",
            f"import {PACKAGE}, iris.cluster.worker.callable_runner, cloudpickle; print('ok')",
        ],
        capture_output=True,
        text=True,
    )
    assert probe.returncode == 0 and probe.stdout.strip() == "ok", probe.stderr

    again: list[str] = []
    fresh_builder = EnvironmentBuilder(envs_dir)  # e.g. after a worker restart
    built = fresh_builder.ensure([f" {PACKAGE}"], log=again.append)
    assert built.reused and again == [f"reusing environment {env_hash}"]


def test_build_failure_carries_uvs_output_and_is_retried(envs_dir: Path) -> None:
    builder = EnvironmentBuilder(envs_dir)
    bad = ["this is not a requirement!!"]
    for _ in range(2):  # no marker is left behind: the second task tries again
        log: list[str] = []
        with pytest.raises(EnvironmentBuildError, match="uv exited with code") as err:
            builder.ensure(bad, log=log.append)
        assert any(line.startswith("building environment") for line in log)
        assert any(line.startswith("uv: ") for line in log)
        assert "installing this is not a requirement!!" in err.value.args[0]
        assert not (envs_dir / builder.hash_of(bad) / READY_MARKER).exists()


def test_waiting_for_a_build_stops_with_the_attempt(envs_dir: Path) -> None:
    builder = EnvironmentBuilder(envs_dir)
    env_hash = builder.hash_of(["something-being-built"])
    stop = threading.Event()
    with hash_lock(envs_dir / f".{env_hash}.lock"):  # another attempt is building it
        threading.Timer(0.2, stop.set).start()
        with pytest.raises(Cancelled):
            builder.ensure(["something-being-built"], cancelled=stop.is_set)
