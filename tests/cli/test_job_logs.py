"""`iris job logs --tail/--since/-f`: per-task tails, time windows, tasks interleaved by time."""

from __future__ import annotations

import subprocess
from datetime import datetime
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from tests.cli.helpers import IRIS, LineReader, iris_env, run_iris
from tests.conftest import wait_until

from iris.cli.text import parse_since
from iris.client import Entrypoint, IrisClient, JobState
from iris.client.job import select_lines
from iris.client.local_cluster import LocalCluster
from iris.rpc.models import LogLine

NOW = 1_800_000_000.0


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("30s", NOW - 30),
        ("5m", NOW - 300),
        ("1h", NOW - 3600),
        ("1h30m", NOW - 5400),
        ("2d", NOW - 172_800),
        ("1.5h", NOW - 5400),
        (" 10M ", NOW - 600),
        ("2027-01-15T08:00:00Z", 1_800_000_000.0),
        ("2027-01-15T09:00:00+01:00", 1_800_000_000.0),
    ],
)
def test_parse_since(text: str, expected: float) -> None:
    assert parse_since(text, NOW) == pytest.approx(expected)


def test_parse_since_reads_a_naive_time_as_local() -> None:
    assert parse_since("2027-01-15T08:00", NOW) == datetime(2027, 1, 15, 8, 0).timestamp()


@pytest.mark.parametrize("text", ["", "5", "m", "5x", "5m3", "yesterday", "2027-13-01"])
def test_parse_since_refuses_other_text(text: str) -> None:
    with pytest.raises(ValueError, match="expected a duration"):
        parse_since(text, NOW)


def _line(ts: float, task: int, text: str = "") -> LogLine:
    return LogLine(ts=ts, stream="stdout", line=text or f"{task}@{ts}", task_index=task)


def test_select_lines_tails_each_task_then_interleaves_by_time() -> None:
    lines = [_line(1, 0), _line(5, 0), _line(9, 0), _line(2, 1), _line(6, 1), _line(7, 1)]
    assert [x.line for x in select_lines(lines, tail=1)] == ["1@7", "0@9"]
    assert [x.line for x in select_lines(lines, tail=2)] == ["0@5", "1@6", "1@7", "0@9"]
    assert [x.line for x in select_lines(lines, since=6)] == ["1@6", "1@7", "0@9"]
    assert [x.line for x in select_lines(lines, since=6, tail=1)] == ["1@7", "0@9"]
    assert select_lines(lines, tail=0) == []


@given(
    st.lists(st.tuples(st.floats(0, 100), st.integers(0, 3)), max_size=40),
    st.one_of(st.none(), st.integers(0, 5)),
    st.one_of(st.none(), st.floats(0, 100)),
)
def test_select_lines_properties(raw: list[tuple[float, int]], tail: int | None, since: float | None) -> None:
    # Each task's lines are in time order, as a log is.
    lines = [_line(ts, task, f"{task}:{i}") for i, (ts, task) in enumerate(sorted(raw))]
    out = select_lines(lines, since=since, tail=tail)
    assert [x.ts for x in out] == sorted(x.ts for x in out)
    for task in {t for _, t in raw}:
        mine = [x for x in lines if x.task_index == task and (since is None or x.ts >= since)]
        expected = mine if tail is None else mine[len(mine) - tail :] if tail else []
        assert [x for x in out if x.task_index == task] == expected


SCRIPT = (
    # Task 1 speaks first, task 0 later: time order differs from task order.
    'if [ "$IRIS_TASK_INDEX" = 0 ]; then sleep 0.8; fi; echo "first $IRIS_TASK_INDEX"; '
    'echo "middle $IRIS_TASK_INDEX"; sleep 1.6; echo "last $IRIS_TASK_INDEX"'
)


def test_logs_tail_since_and_interleaving(cluster: LocalCluster, client: IrisClient, workdir: Path) -> None:
    job = client.submit(Entrypoint.from_command("sh", "-c", SCRIPT), replicas=2)
    assert job.wait(timeout=30).state is JobState.SUCCEEDED
    api_lines = sorted((x for x in job.log_lines() if x.stream != "system"), key=lambda x: x.ts)

    everything = run_iris(cluster, workdir, "job", "logs", job.job_id)
    assert everything.returncode == 0, everything.stderr
    assert everything.stdout.splitlines() == [f"[task {x.task_index}] {x.line}" for x in api_lines]
    assert everything.stdout.splitlines()[:2] == ["[task 1] first 1", "[task 1] middle 1"]

    tail = run_iris(cluster, workdir, "job", "logs", job.job_id, "--tail", "1")
    assert tail.stdout.splitlines() == ["[task 1] last 1", "[task 0] last 0"]

    only_task = run_iris(cluster, workdir, "job", "logs", job.job_id, "--task", "0", "--tail", "2")
    assert only_task.stdout.splitlines() == ["middle 0", "last 0"]  # one task: no prefix

    cut = next(x.ts for x in api_lines if x.line == "last 1") - 0.3  # after every "middle"
    since = run_iris(
        cluster, workdir, "job", "logs", job.job_id, "--since", datetime.fromtimestamp(cut).isoformat()
    )
    assert since.stdout.splitlines() == ["[task 1] last 1", "[task 0] last 0"]
    recent = run_iris(cluster, workdir, "job", "logs", job.job_id, "--since", "10m")
    assert recent.stdout == everything.stdout

    bad = run_iris(cluster, workdir, "job", "logs", job.job_id, "--since", "lately")
    assert bad.returncode == 2 and "expected a duration" in bad.stderr


def test_follow_with_tail_starts_from_the_last_lines(
    cluster: LocalCluster, client: IrisClient, workdir: Path
) -> None:
    # The third line waits for a marker the test writes once the CLI has shown the tail: no race.
    marker = workdir / "go"
    script = f"echo one; echo two; while [ ! -e {marker} ]; do sleep 0.05; done; echo three"
    job = client.submit(Entrypoint.from_command("sh", "-c", script))
    wait_until(lambda: "two" in job.logs(), what="the second line")
    proc = subprocess.Popen(
        [*IRIS, "job", "logs", "-f", "--tail", "1", job.job_id],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        stdin=subprocess.DEVNULL,
        text=True,
        cwd=workdir,
        env=iris_env(cluster),
    )
    assert proc.stdout is not None
    reader = LineReader(proc.stdout)
    reader.wait_for("two")
    marker.touch()
    assert reader.rest() == ["two", "three"]
    assert proc.wait(timeout=30) == 0
