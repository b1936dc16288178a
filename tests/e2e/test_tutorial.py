"""docs/tutorial.md, run as written: every command it shows, in its order, against the cluster its
§3 starts (`iris cluster start --local --workers 2`, given a free port, a temporary state dir and
fixed worker sizes). Outputs are checked for what the text promises, not byte for byte (job names
carry the time). Each section is a test; the whole walk takes about a minute on a loaded machine,
which is why it is split and the cluster is shared."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from tests.cli.helpers import LineReader
from tests.conftest import free_port, wait_until

TUTORIAL = Path(__file__).resolve().parents[2] / "docs" / "tutorial.md"
BIN = Path(sys.executable).parent  # `iris` and `python` of this venv, as `source .venv/bin/activate`


class Shell:
    """Runs tutorial lines with bash in the tutorial's directory, `iris` on PATH."""

    def __init__(self, cwd: Path, url: str) -> None:
        self.cwd = cwd
        self.env = {
            **os.environ,
            "PATH": f"{BIN}:{os.environ['PATH']}",
            "IRIS_CONTROLLER_URL": url,
            "COLUMNS": "200",
        }

    def __call__(self, line: str, *, code: int = 0, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            ["bash", "-c", line],
            cwd=self.cwd,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
        )
        assert done.returncode == code, f"{line}\nexit {done.returncode}\n{done.stdout}\n{done.stderr}"
        return done


def commands() -> list[str]:
    """Every `$ ` line of the tutorial's console blocks, in order."""
    out, inside = [], False
    for line in TUTORIAL.read_text().splitlines():
        if line.startswith("```"):
            inside = line.strip() == "```console"
            continue
        if inside and line.startswith("$ "):
            out.append(line[2:])
    return out


RAN: set[str] = set()


@pytest.fixture(scope="module")
def tut(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Shell]:
    root = tmp_path_factory.mktemp("tut")
    port = free_port()
    line = "iris cluster start --local --workers 2"
    RAN.add(line)
    log = (root / "cluster.log").open("w")
    proc = subprocess.Popen(
        [
            "bash",
            "-c",
            f"exec {line} --port {port} --state-dir {root / 'state'} --worker-cpu 1 --worker-memory 2GB",
        ],
        cwd=root,
        env={**os.environ, "PATH": f"{BIN}:{os.environ['PATH']}"},
        stdout=subprocess.PIPE,
        stderr=log,
        stdin=subprocess.DEVNULL,
        text=True,
        start_new_session=True,
    )
    assert proc.stdout is not None
    reader = LineReader(proc.stdout)
    try:
        reader.wait_for("is up", timeout=120)
        reader.wait_for("Press Ctrl-C to stop.", timeout=30)
        shell = Shell(root, f"http://127.0.0.1:{port}")
        for printed in reader.lines:  # the one-time token the cluster prints, as the user exports it
            if printed.strip().startswith("export IRIS_TOKEN="):
                shell.env["IRIS_TOKEN"] = printed.strip().removeprefix("export IRIS_TOKEN=")
        yield shell
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


def run(sh: Shell, line: str, **kw: object) -> subprocess.CompletedProcess[str]:
    RAN.add(line)
    return sh(line, **kw)  # type: ignore[arg-type]


def test_1_to_3_install_a_first_job_and_the_cluster(tut: Shell) -> None:
    assert re.fullmatch(r"iris, version \S+\n", run(tut, "iris --version").stdout)
    first = run(tut, "iris job run --local -- echo hello")
    assert first.stdout == "hello\n" and "starting a local cluster..." in first.stderr
    RAN.update({"uv sync", "source .venv/bin/activate"})  # the test runs in the synced venv
    RAN.update(c for c in commands() if c.startswith("export IRIS_"))  # the Shell's environment
    workers = run(tut, "iris worker list").stdout
    assert "worker-0" in workers and "worker-1" in workers and workers.count("HEALTHY") == 2
    assert "workers: HEALTHY 2" in run(tut, "iris cluster status").stdout


def test_4_and_5_your_own_script_and_replicas(tut: Shell) -> None:
    script = TUTORIAL.read_text().split("$ cat > train.py <<'EOF'\n", 1)[1].split("\nEOF\n", 1)[0]
    run(tut, "mkdir hello && cd hello")
    tut.cwd = tut.cwd / "hello"
    RAN.add("cat > train.py <<'EOF'")
    run(tut, f"cat > train.py <<'EOF'\n{script}\nEOF")
    three = run(tut, "iris job run -- python train.py --epochs 3")
    assert three.stdout == "".join(f"task 0: epoch {e}/3 done\n" for e in (1, 2, 3))
    RAN.add("echo $?")
    four = run(
        tut, "iris job run --name train --replicas 4 --cpu 0.5 --memory 256MB -- python train.py --epochs 2"
    )
    assert sorted(four.stdout.splitlines()) == sorted(
        f"[task {t}] task {t}: epoch {e}/2 done" for t in range(4) for e in (1, 2)
    )
    job_id = re.search(r"^job (/\S+/train)$", four.stderr, re.M).group(1)  # type: ignore[union-attr]
    RAN.add("iris job status /root/train")
    status = tut(f"iris job status {job_id}").stdout
    assert "SUCCEEDED" in status and "0.5 cpu, 256MB × 4 task(s)" in status


def test_6_jobs_in_the_background(tut: Shell) -> None:
    submitted = run(tut, "iris job run --no-wait --name long --replicas 2 -- python train.py --epochs 20")
    long_id = submitted.stdout.strip()
    assert long_id.endswith("/long")
    wait_until(
        lambda: "epoch 2/20" in tut(f"iris job logs {long_id}").stdout, timeout=60, what="long running"
    )
    assert "RUNNING" in run(tut, "iris job list").stdout
    RAN.add("iris job logs /root/long --tail 2")
    tail = tut(f"iris job logs {long_id} --tail 2").stdout.splitlines()
    assert len(tail) == 4 and {line[:8] for line in tail} == {"[task 0]", "[task 1]"}
    RAN.add("iris job logs /root/long --since 1s --task 1")
    assert all(
        line.startswith("task 1: ")
        for line in tut(f"iris job logs {long_id} --since 1s --task 1").stdout.splitlines()
    )
    RAN.add("iris job stop /root/long")
    assert tut(f"iris job stop {long_id}").stdout.strip() == f"{long_id}: KILLED"
    RAN.add("iris job status /root/long --attempts")
    assert "killed by request" in tut(f"iris job status {long_id} --attempts").stdout

    markup = run(
        tut,
        "iris job run --no-workspace --name markup -- sh -c 'echo \"[/bold] print(l[i])\"; exit 2'",
        code=2,
    )
    assert markup.stdout == "[/bold] print(l[i])\n"
    assert 'sh -c echo "[/bold] print(l[i])"; exit 2' in run(tut, "iris job list").stdout
    assert '"submitted_at": "' in run(tut, "iris job status markup -o json | grep submitted_at").stdout
    bogus = run(tut, "iris job list --state bogus", code=2)
    assert "unknown state 'bogus'" in bogus.stderr


def test_6_ctrl_c_stops_the_job(tut: Shell) -> None:
    line = "iris job run --name interrupt-me -- sleep 60"
    RAN.add(line)
    proc = subprocess.Popen(
        ["bash", "-c", f"exec {line}"], cwd=tut.cwd, env=tut.env, stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True,
    )  # fmt: skip
    try:
        assert proc.stderr is not None
        reader = LineReader(proc.stderr)
        reader.wait_for("dashboard: ")
        wait_until(
            lambda: "RUNNING" in tut("iris job status interrupt-me").stdout, what="interrupt-me running"
        )
        proc.send_signal(signal.SIGINT)
        reader.wait_for("press Ctrl-C again to detach")
        assert proc.wait(timeout=60) == 130
        assert reader.wait_for("KILLED")
    finally:
        if proc.poll() is None:
            proc.kill()


def test_7_retries_show_every_attempt(tut: Shell) -> None:
    line = next(c for c in commands() if "--name flaky" in c)
    flaky = run(tut, line)
    assert flaky.stdout == "attempt 0\nattempt 1\nattempt 2\n"
    assert (
        "--- task 0: attempt 0 failed (exit 1, will retry: 1 of 2 left); attempt 1 starting on worker-"
        in flaky.stderr
    )
    RAN.add("iris job status /root/flaky --attempts")
    status = tut("iris job status flaky --attempts").stdout
    assert status.count("exited with code 1") == 2 and "SUCCEEDED" in status


def test_8_why_is_my_job_waiting(tut: Shell) -> None:
    dry = run(tut, "iris job run --dry-run --cpu 16 -- python train.py", code=1)
    assert "needs 16 cpu" in dry.stdout
    refused = run(tut, "iris job run --no-wait --name big --cpu 16 -- python train.py", code=1)
    assert "no worker can ever run this job" in refused.stderr
    big = run(
        tut, "iris job run --no-wait --wait-for-capacity --name big --cpu 16 -- python train.py"
    ).stdout.strip()
    RAN.add("iris job status /root/big")
    wait_until(lambda: "needs 16 cpu" in tut(f"iris job status {big}").stdout, timeout=30, what="the reason")
    RAN.add("iris job stop /root/big")
    assert tut(f"iris job stop {big}").stdout.strip() == f"{big}: KILLED"
    assert (
        "no worker satisfies pool=gpu"
        in run(tut, "iris job run --dry-run --constraint 'pool=gpu' -- python train.py", code=1).stdout
    )
    assert (
        "would place 1 task now"
        in run(tut, "iris job run --dry-run --prefer pool=gpu -- python train.py").stdout
    )
    assert "needs 2 gpu" in run(tut, "iris job run --dry-run --gpu 2 -- python train.py", code=1).stdout
    zone = run(tut, "iris job run --zone us-east1-b -- true", code=2)
    assert "no worker is in zone 'us-east1-b'" in zone.stderr


def test_9_from_python_results_come_back(tut: Shell) -> None:
    code = TUTORIAL.read_text().split("`sweep.py`:\n\n```python\n", 1)[1].split("\n```", 1)[0]
    (tut.cwd / "sweep.py").write_text(code + "\n")
    out = run(tut, "python sweep.py").stdout.splitlines()
    assert re.fullmatch(r"/\S+/sweep \[0\.909, 0\.5, 0\.091\]", out[0]), out
    assert [line.split(" on ")[0] for line in out[1:]] == ["task 0", "task 1", "task 2"]


def heredoc(name: str) -> str:
    """The body of the tutorial's `cat > NAME <<'EOF'` block."""
    return TUTORIAL.read_text().split(f"$ cat > {name} <<'EOF'\n", 1)[1].split("\nEOF\n", 1)[0]


def test_10_your_projects_dependencies(tut: Shell) -> None:
    run(tut, "cd .. && mkdir jokes && cd jokes")
    tut.cwd = tut.cwd.parent / "jokes"
    for name in ("pyproject.toml", "joke.py"):
        RAN.add(f"cat > {name} <<'EOF'")
        run(tut, f"cat > {name} <<'EOF'\n{heredoc(name)}\nEOF")
    run(tut, "uv lock --quiet")
    joke = run(tut, "iris job run --name joke -- python joke.py", timeout=180)
    assert joke.stdout.strip(), joke.stderr  # a joke, from the project's pyjokes
    built = run(tut, "iris job logs joke --system --grep environment").stdout.splitlines()
    assert built[0].startswith("building environment ") and "uv sync --frozen (uv.lock " in built[0], built
    env_hash = built[0].split()[2].rstrip(":")
    assert built[1].startswith(f"built environment {env_hash} in ")
    run(tut, "iris job run --name joke-again -- python joke.py", timeout=180)
    again = run(tut, "iris job logs joke-again --system --grep environment").stdout
    # Reused on the same worker; the other worker (if the job went there) builds the same one once.
    assert f"reusing environment {env_hash}" in again or f"building environment {env_hash}" in again, again
    broken = run(tut, "iris job run --extra gpu -- python joke.py", code=1)
    assert "FAILED (ENVIRONMENT)" in broken.stderr
    assert "Extra `gpu` is not defined in the `optional-dependencies` table for `jokes`" in broken.stderr


def test_11_what_the_cluster_saw(tut: Shell) -> None:
    url = tut.env["IRIS_CONTROLLER_URL"]
    metrics = httpx.get(f"{url}/metrics", timeout=30).text
    assert re.search(r'^iris_tasks\{state="SUCCEEDED"\} \d', metrics, re.M)
    assert re.search(r"^iris_task_start_latency_seconds_count \d", metrics, re.M)
    for line in commands():
        if line.startswith("curl "):
            assert run(tut, line).stdout.startswith("iris_"), line


def test_zz_every_command_of_the_tutorial_was_run() -> None:
    missing = [c for c in commands() if c not in RAN]
    assert not missing, f"tutorial commands no test ran: {missing}"
