"""`iris completion SHELL` prints a script, and the `iris` entry point answers what it asks."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

IRIS = [sys.executable, "-m", "iris.cli.main"]


def iris(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*IRIS, *args], capture_output=True, text=True, timeout=60, env={**os.environ, **(env or {})}
    )


@pytest.mark.parametrize(
    ("shell", "marker"),
    [
        ("bash", "complete -o nosort -F _iris_completion iris"),
        ("zsh", "#compdef iris"),
        ("fish", "complete --no-files --command iris"),
    ],
)
def test_completion_prints_the_script(shell: str, marker: str) -> None:
    result = iris("completion", shell)
    assert result.returncode == 0, result.stderr
    assert marker in result.stdout
    assert "_IRIS_COMPLETE" in result.stdout


def test_unknown_shell_is_refused() -> None:
    result = iris("completion", "tcsh")
    assert result.returncode == 2
    assert "'tcsh' is not one of 'bash', 'zsh', 'fish'" in result.stderr


def _complete(words: str) -> list[str]:
    env = {"_IRIS_COMPLETE": "bash_complete", "COMP_WORDS": words, "COMP_CWORD": str(len(words.split()) - 1)}
    result = subprocess.run([*IRIS], capture_output=True, text=True, timeout=60, env={**os.environ, **env})
    assert result.returncode == 0, result.stderr
    return [line.split(",", 1)[1] for line in result.stdout.splitlines()]


def test_entry_point_completes_commands_options_and_choices() -> None:
    assert _complete("iris jo") == ["job"]
    assert set(_complete("iris job l")) == {"list", "logs"}
    assert set(_complete("iris job logs --ta")) == {"--tail", "--task"}
    assert _complete("iris completion z") == ["zsh"]


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_bash_loads_the_script() -> None:
    script = iris("completion", "bash").stdout
    result = subprocess.run(
        ["bash", "-c", f"{script}\ncomplete -p iris"], capture_output=True, text=True, timeout=30
    )
    assert result.returncode == 0, result.stderr
    assert "_iris_completion" in result.stdout
