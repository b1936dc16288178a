"""The README's first command and the CLI's handling of bad input, as a user runs them."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

IRIS = [sys.executable, "-m", "iris.cli.main"]


def run_iris(
    *args: str, timeout: float = 120, env: dict[str, str] | None = None, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*IRIS, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
        cwd=cwd,
    )


# The tests run from an empty directory: the repository is a uv project, whose lock a job would sync.
def test_job_run_local_echo_hello(tmp_path: Path) -> None:
    result = run_iris("job", "run", "--local", "--", "echo", "hello", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["hello"]
    # The embedded cluster stops with the job: no dashboard link that would be dead at once.
    assert "dashboard:" not in result.stderr


def test_job_run_local_exit_code_is_the_jobs(tmp_path: Path) -> None:
    result = run_iris("job", "run", "--local", "--", "sh", "-c", "echo about to fail; exit 3", cwd=tmp_path)
    assert result.returncode == 3, result.stderr
    assert "about to fail" in result.stdout
    assert "FAILED" in result.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["job", "run", "--memory", "lots", "--", "true"], "not a size"),
        (["job", "run", "--", ""], "the command is empty"),
        (["job", "run"], "Missing argument"),
        (["job", "status", "/nobody/nothing"], "cannot reach the controller"),
        (["job", "run", "--cpu", "many", "--", "true"], "not a cpu amount"),
        (["job", "run", "--env", "NOEQUALS", "--", "true"], "KEY=VALUE"),
    ],
)
def test_bad_input_gets_one_clear_sentence(args: list[str], message: str) -> None:
    result = run_iris(*args, env={"IRIS_CONTROLLER_URL": "http://127.0.0.1:9"})
    assert result.returncode != 0
    assert message in result.stderr
    assert "Traceback" not in result.stderr + result.stdout
