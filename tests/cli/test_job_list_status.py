"""`iris job list` and `iris job status` as kubectl/Slurm users expect: formats, filters, watch,
short names, completion; and the one-sentence errors of job logs/exec/ps."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from datetime import datetime
from pathlib import Path

import pytest
import yaml
from tests.cli.helpers import IRIS, LineReader, iris_env, run_iris
from tests.conftest import wait_until

from iris.client import IrisClient, JobState
from iris.client.client import default_user
from iris.client.local_cluster import LocalCluster

# Each test runs the CLI several times; on a loaded 2-core machine one start of Python can take 30s.
pytestmark = pytest.mark.timeout(900)


@pytest.fixture(scope="module")
def jobs(cluster: LocalCluster, tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """Three finished jobs: train (succeeded), evaluate (failed), and alpha (succeeded)."""
    cwd = tmp_path_factory.mktemp("jobs")
    ids = {}
    for name, code in (("train", 0), ("evaluate", 3), ("alpha", 0)):
        run = run_iris(
            cluster, cwd, "job", "run", "--no-workspace", "--name", name, "--", "sh", "-c", f"exit {code}"
        )
        assert run.returncode == code, run.stderr
        ids[name] = f"/{default_user()}/{name}"
    return ids


def _json(result: subprocess.CompletedProcess[str]) -> dict:
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_short_names_resolve_for_the_current_user(
    cluster: LocalCluster, jobs: dict[str, str], workdir: Path
) -> None:
    detail = _json(run_iris(cluster, workdir, "job", "status", "train", "--json"))
    assert detail["job_id"] == jobs["train"]
    assert (
        _json(run_iris(cluster, workdir, "job", "status", jobs["train"].lstrip("/"), "-o", "json"))["job_id"]
        == jobs["train"]
    )
    missing = run_iris(cluster, workdir, "job", "status", "nosuchjob")
    assert missing.returncode == 1
    assert f"no job named 'nosuchjob' of user {default_user()}" in missing.stderr
    assert len(missing.stderr.strip().splitlines()) == 1


def test_json_and_yaml_carry_iso_times(cluster: LocalCluster, jobs: dict[str, str], workdir: Path) -> None:
    listed = _json(run_iris(cluster, workdir, "job", "list", "-o", "json"))
    as_yaml = yaml.safe_load(run_iris(cluster, workdir, "job", "list", "-o", "yaml").stdout)
    assert {j["job_id"] for j in listed["jobs"]} == {j["job_id"] for j in as_yaml["jobs"]}
    for j in listed["jobs"]:
        assert j["submitted_at"].endswith("Z")
        assert datetime.fromisoformat(j["submitted_at"].replace("Z", "+00:00")).year >= 2024
    status = yaml.safe_load(run_iris(cluster, workdir, "job", "status", "evaluate", "-o", "yaml").stdout)
    assert status["state"] == "FAILED" and status["finished_at"].endswith("Z")


def test_wide_shows_more_columns(cluster: LocalCluster, jobs: dict[str, str], workdir: Path) -> None:
    wide = run_iris(cluster, workdir, "job", "list", "-o", "wide")
    assert wide.returncode == 0
    header = wide.stdout.splitlines()[0].split()
    assert {"USER", "PRIORITY", "RESOURCES"} <= set(header)
    status = run_iris(cluster, workdir, "job", "status", "train", "-o", "wide")
    assert "ATTEMPT" in status.stdout and "UID" in status.stdout


def test_list_filters_and_order(cluster: LocalCluster, jobs: dict[str, str], workdir: Path) -> None:
    def ids(*flags: str) -> list[str]:
        return [
            j["job_id"] for j in _json(run_iris(cluster, workdir, "job", "list", "--json", *flags))["jobs"]
        ]

    ours = set(jobs.values())
    assert [i for i in ids("--state", "failed") if i in ours] == [jobs["evaluate"]]
    assert set(ids("--state", "succeeded,failed")) >= ours
    assert ids("--name", "evalu") == [jobs["evaluate"]]
    by_name = [i for i in ids("--sort", "name") if i in ours]
    assert by_name == sorted(ours)
    assert [i for i in ids("--sort", "name", "--reverse") if i in ours] == sorted(ours, reverse=True)
    assert set(ids("--since", "1h")) >= ours
    assert ids("--since", "2999-01-01T00:00") == []
    everything = ids("--sort", "name")
    assert ids("--sort", "name", "--offset", "1", "--limit", "1") == everything[1:2]


def test_an_unknown_state_is_refused_with_the_valid_ones(cluster: LocalCluster, workdir: Path) -> None:
    result = run_iris(cluster, workdir, "job", "list", "--state", "bogus")
    assert result.returncode == 2
    assert "unknown state 'bogus'; choose from pending, running, succeeded, failed" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_status_watch_follows_the_job_until_it_ends(
    cluster: LocalCluster, client: IrisClient, workdir: Path
) -> None:
    submitted = _json(
        run_iris(
            cluster, workdir, "job", "run", "--no-workspace", "--no-wait", "--json", "--", "sleep", "300"
        )
    )
    job_id = submitted["job_id"]
    proc = subprocess.Popen(
        [*IRIS, "job", "status", job_id, "--watch", "--interval", "0.2", "-o", "json"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=workdir, env=iris_env(cluster),
        stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert proc.stdout is not None
    out = LineReader(proc.stdout)
    out.wait_for('"state": "', timeout=180)  # the first snapshot, while the job runs
    client.job(job_id).kill()
    lines = out.rest(timeout=180)
    assert proc.wait(timeout=30) == 0, "the watch ends by itself when the job ends"
    decoder = json.JSONDecoder()
    snapshots, text = [], "\n".join(lines).strip()
    while text:
        obj, end = decoder.raw_decode(text)
        snapshots.append(obj)
        text = text[end:].strip()
    assert len(snapshots) >= 2, "a snapshot per change"
    assert snapshots[0]["state"] in ("PENDING", "RUNNING")
    assert snapshots[-1]["state"] == "KILLED"


def test_list_watch_prints_changes_until_interrupted(cluster: LocalCluster, workdir: Path) -> None:
    proc = subprocess.Popen(
        [*IRIS, "job", "list", "--watch", "--interval", "0.2"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=workdir, env=iris_env(cluster),
        stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert proc.stdout is not None
    out = LineReader(proc.stdout)
    try:
        out.wait_for(("JOB", "no jobs"), timeout=180)  # the first snapshot (the store may be empty)
        submitted = _json(
            run_iris(cluster, workdir, "job", "run", "--no-workspace", "--no-wait", "--json", "--", "true")
        )
        out.wait_for(submitted["job_id"], timeout=180)
    finally:
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=180) == 0


def test_completion_offers_job_ids(cluster: LocalCluster, jobs: dict[str, str], workdir: Path) -> None:
    def complete(words: str) -> list[str]:
        env = {**iris_env(cluster), "_IRIS_COMPLETE": "bash_complete", "COMP_WORDS": words}
        env["COMP_CWORD"] = str(len(words.split()) - 1)
        result = subprocess.run([*IRIS], capture_output=True, text=True, timeout=180, env=env, cwd=workdir)
        assert result.returncode == 0, result.stderr
        return [line.split(",", 1)[1] for line in result.stdout.splitlines() if "," in line]

    assert complete(f"iris job logs /{default_user()}/trai") == [jobs["train"]]
    assert complete("iris job status tra") == ["train"]
    assert complete(f"iris job stop {jobs['alpha']} /{default_user()}/ev") == [jobs["evaluate"]]


@pytest.mark.parametrize("command", [["logs", "--task", "7"], ["ps", "--task", "7"], ["exec", "--task", "7"]])
def test_a_task_that_does_not_exist_is_one_sentence(
    cluster: LocalCluster, jobs: dict[str, str], workdir: Path, command: list[str]
) -> None:
    args = ["job", command[0], jobs["train"], *command[1:]] + (["--", "true"] if command[0] == "exec" else [])
    result = run_iris(cluster, workdir, *args)
    assert result.returncode == 2
    assert f"job {jobs['train']} has no task 7; it has task 0" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr


def test_ps_of_an_unknown_job_and_exec_into_a_finished_one(
    cluster: LocalCluster, jobs: dict[str, str], workdir: Path
) -> None:
    unknown = run_iris(cluster, workdir, "job", "ps", f"/{default_user()}/never-ran")
    assert unknown.returncode == 1 and "does not exist" in unknown.stderr
    assert len(unknown.stderr.strip().splitlines()) == 1
    finished = run_iris(cluster, workdir, "job", "exec", jobs["train"], "--", "true")
    assert finished.returncode == 1
    assert f"task 0 of {jobs['train']} is succeeded, not running" in finished.stderr


def test_a_missing_command_is_one_sentence_and_exit_127(cluster: LocalCluster, workdir: Path) -> None:
    result = run_iris(cluster, workdir, "job", "run", "--no-workspace", "--", "no-such-command-xyz")
    assert result.returncode == 127, result.stderr
    assert "no-such-command-xyz" in result.stderr and "Traceback" not in result.stderr


def test_piped_input_is_said_not_to_reach_the_job(cluster: LocalCluster, workdir: Path) -> None:
    result = subprocess.run(
        [*IRIS, "job", "run", "--no-workspace", "--", "cat"],
        input="hello\n", capture_output=True, text=True, timeout=180, cwd=workdir, env=iris_env(cluster),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "standard input is not passed to the job" in result.stderr
    assert result.stdout == ""


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])
def test_sigterm_and_sighup_stop_the_job_like_ctrl_c(
    cluster: LocalCluster, client: IrisClient, workdir: Path, sig: signal.Signals
) -> None:
    proc = subprocess.Popen(
        [*IRIS, "job", "run", "--no-workspace", "--", "sleep", "120"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True,
        cwd=workdir, env=iris_env(cluster),
    )  # fmt: skip
    assert proc.stderr is not None
    err = LineReader(proc.stderr)
    job_id = err.wait_for("job /", timeout=180).split()[1]
    wait_until(lambda: client.job(job_id).status() is JobState.RUNNING, what="running")
    os.kill(proc.pid, sig)
    err.wait_for("press Ctrl-C again to detach")
    assert proc.wait(timeout=180) == 130
    assert client.job(job_id).status() is JobState.KILLED


def test_port_in_use_is_one_sentence(cluster: LocalCluster, workdir: Path) -> None:
    port = cluster.url.rsplit(":", 1)[1]
    result = run_iris(
        cluster, workdir, "cluster", "start", "--local", "--port", port, "--state-dir", str(workdir / "s")
    )
    assert result.returncode == 1
    assert f"port {port} on 127.0.0.1 is in use; choose another with --port" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
