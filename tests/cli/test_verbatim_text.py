"""User text is printed verbatim by every command: never Rich markup, never highlighted.

Commands, job output, errors and worker attributes carry ``[/bold]``, ``[red]``, ``[link=x]``,
terminal escapes, ``\\r`` and bytes that are not UTF-8; each command that shows them must neither
crash nor reinterpret them, and tables must keep each row on one line without escape sequences.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.cli.helpers import IRIS, iris_env

from iris.client.local_cluster import LocalCluster

ESC = "\x1b"
MARKUP = "[/bold] [red]x [link=x]y print(l[i]) 12345 :smile:"
ODD_ATTRIBUTE = f"[red]rack[/bold]{ESC}[31m7"
# The job prints markup, colour escapes, a carriage return and a byte that is not UTF-8, and its
# command text itself holds a real escape and a carriage return (in a shell comment).
SCRIPT = (
    f"echo '{MARKUP}'; printf 'a\\033[31mred\\033[0m\\rb\\n'; printf 'bad\\377utf\\n'; "
    f"echo '[red]oops[/red]' >&2; exit 2 # {ESC}[2J\rhidden"
)
RAW_STDOUT = f"{MARKUP}\na{ESC}[31mred{ESC}[0m\rb\nbad\ufffdutf\n"
# Shown by default: colours kept, the carriage return as text (it cannot hide "a red").
EXPECTED_STDOUT = f"{MARKUP}\na{ESC}[31mred{ESC}[0m\\rb\nbad\ufffdutf\n"


def run_iris(
    cluster: LocalCluster, cwd: Path, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """``iris ARGS`` with its output decoded as UTF-8 but not newline-translated (``\r`` kept)."""
    raw = subprocess.run(
        [*IRIS, *args],
        capture_output=True,
        timeout=180,  # a loaded machine starts Python slowly
        cwd=cwd,
        env=env or iris_env(cluster),
        stdin=subprocess.DEVNULL,
    )
    return subprocess.CompletedProcess(raw.args, raw.returncode, raw.stdout.decode(), raw.stderr.decode())


@pytest.fixture(scope="module")
def cluster() -> Iterator[LocalCluster]:
    with LocalCluster(workers=1, worker_cpu="8", worker_attributes=[{"note": ODD_ATTRIBUTE}]) as lc:
        yield lc


@pytest.fixture(scope="module")
def odd_job(cluster: LocalCluster, tmp_path_factory: pytest.TempPathFactory) -> str:
    cwd = tmp_path_factory.mktemp("odd")
    result = run_iris(cluster, cwd, "job", "run", "--no-workspace", "--name", "odd", "--", "sh", "-c", SCRIPT)
    assert result.returncode == 2, result.stderr
    assert result.stdout == EXPECTED_STDOUT
    assert "[red]oops[/red]" in result.stderr.splitlines()
    listed = json.loads(run_iris(cluster, cwd, "job", "list", "--json").stdout)
    return listed["jobs"][0]["job_id"]


def _check_clean(result: subprocess.CompletedProcess[str]) -> None:
    out = result.stdout + result.stderr
    assert result.returncode == 0, out
    assert "Traceback" not in out and "MarkupError" not in out
    assert ESC not in result.stdout and "\r" not in result.stdout


def test_job_run_and_logs_pass_output_through(cluster: LocalCluster, odd_job: str, tmp_path: Path) -> None:
    logs = run_iris(cluster, tmp_path, "job", "logs", odd_job)
    assert logs.returncode == 0, logs.stderr
    assert logs.stdout == EXPECTED_STDOUT
    assert logs.stderr == "[red]oops[/red]\n"
    raw = run_iris(cluster, tmp_path, "job", "logs", "--raw", odd_job)
    assert raw.returncode == 0, raw.stderr
    assert raw.stdout == RAW_STDOUT


# A window title, a clipboard write (OSC 52), a hyperlink (OSC 8), a screen clear, a bell.
HOSTILE = "\x1b]0;pwned\x07\x1b]52;c;cm0gLXJmIH4=\x07\x1b]8;;http://evil\x1b\\click\x1b]8;;\x1b\\\x1b[2J\x07"


def test_job_output_cannot_drive_the_terminal(cluster: LocalCluster, tmp_path: Path) -> None:
    command = ["python3", "-c", f"import sys; sys.stdout.write({HOSTILE!r} + 'end\\n')"]
    run = run_iris(cluster, tmp_path, "job", "run", "--no-workspace", "--name", "hostile", "--", *command)
    assert run.returncode == 0, run.stderr
    job_id = next(line.split()[1] for line in run.stderr.splitlines() if line.startswith("job /"))
    logs = run_iris(cluster, tmp_path, "job", "logs", job_id)
    for shown in (run.stdout, logs.stdout):
        assert ESC not in shown and "\x07" not in shown, repr(shown)
        assert shown == HOSTILE.replace(ESC, "\\x1b").replace("\x07", "\\x07") + "end\n"
    raw = run_iris(cluster, tmp_path, "job", "logs", "--raw", job_id)
    assert raw.stdout == HOSTILE + "end\n"


def test_job_list_shows_the_command_on_one_row(cluster: LocalCluster, odd_job: str, tmp_path: Path) -> None:
    result = run_iris(cluster, tmp_path, "job", "list")
    _check_clean(result)
    rows = [row for row in result.stdout.splitlines() if odd_job in row]
    assert len(rows) == 1, result.stdout
    assert MARKUP in rows[0]
    assert rows[0].rstrip().endswith("…") and len(rows[0]) <= 200  # cut to the width, not wrapped
    wide = run_iris(cluster, tmp_path, "job", "list", env={**iris_env(cluster), "COLUMNS": "400"})
    assert "exit 2 #  ↵ hidden" in wide.stdout


def test_job_status_prints_command_and_error_verbatim(
    cluster: LocalCluster, odd_job: str, tmp_path: Path
) -> None:
    for args in (["job", "status", odd_job], ["job", "status", "--attempts", odd_job]):
        result = run_iris(cluster, tmp_path, *args)
        _check_clean(result)
        assert f"echo '{MARKUP}'" in result.stdout
        assert "exited with code 2" in result.stdout


def test_nothing_is_highlighted_on_a_colour_terminal(
    cluster: LocalCluster, odd_job: str, tmp_path: Path
) -> None:
    """With colour forced on, our states are coloured but user text carries no escape inside."""
    env = {**iris_env(cluster), "FORCE_COLOR": "1", "TTY_COMPATIBLE": "1"}
    for args in (["job", "list"], ["job", "status", odd_job], ["worker", "list"]):
        result = run_iris(cluster, tmp_path, *args, env=env)
        assert result.returncode == 0, result.stderr
        if args[0] == "job":
            assert ESC in result.stdout, "colour was not forced on; the test checks nothing"
            assert MARKUP in result.stdout
            assert f"{ESC}[2J" not in result.stdout
        else:
            assert "note=[red]rack[/bold]7" in result.stdout


def test_worker_list_shows_attributes_verbatim(cluster: LocalCluster, tmp_path: Path) -> None:
    result = run_iris(cluster, tmp_path, "worker", "list")
    _check_clean(result)
    assert "note=[red]rack[/bold]7" in result.stdout


def test_job_summary_prints_the_failure_verbatim(cluster: LocalCluster, odd_job: str, tmp_path: Path) -> None:
    result = run_iris(cluster, tmp_path, "job", "summary", odd_job)
    out = result.stdout + result.stderr
    assert result.returncode == 0, out
    assert "Traceback" not in out and "MarkupError" not in out


def test_cluster_status_and_json_survive(cluster: LocalCluster, odd_job: str, tmp_path: Path) -> None:
    _check_clean(run_iris(cluster, tmp_path, "cluster", "status"))
    detail = json.loads(run_iris(cluster, tmp_path, "job", "status", "--json", odd_job).stdout)
    assert detail["entrypoint"].endswith(f"{ESC}[2J\rhidden")


def test_a_command_that_is_not_utf8_is_refused_in_one_sentence(cluster: LocalCluster, tmp_path: Path) -> None:
    result = subprocess.run(
        [*[os.fsencode(a) for a in IRIS], b"job", b"run", b"--no-workspace", b"--", b"echo", b"\xff\xfe"],
        capture_output=True,
        env=iris_env(cluster),
        cwd=tmp_path,
        timeout=180,
    )
    assert result.returncode == 2
    err = result.stderr.decode()
    assert "argument 2 of the command" in err and "not valid UTF-8" in err
    assert "Traceback" not in err
