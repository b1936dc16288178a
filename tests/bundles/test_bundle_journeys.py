"""Journeys with real processes: a job submitted from a scratch directory runs from its uploaded
bundle on a worker started elsewhere (after the scratch directory is gone), its sub-job reuses the
bundle, and a bundle that cannot be fetched fails the attempt with a clear log line."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.conftest import wait_until

from iris.client import IrisClient, JobState, LocalCluster

IRIS = [sys.executable, "-m", "iris.cli.main"]

TRAIN = """\
import os, sys
import helper
from iris.client import Entrypoint, iris_ctx
print("cwd:", os.getcwd())
print("helper says:", helper.greeting())
if os.environ.get("SPAWN_CHILD"):
    child = iris_ctx().client.submit(Entrypoint.from_command("python", "child.py"), name="child")
    detail = child.wait(timeout=60)
    print("child finished:", detail.state.value)
    sys.exit(0 if detail.state.value == "SUCCEEDED" else 1)
"""
HELPER = 'def greeting():\n    return "hello from the bundle"\n'
CHILD = 'import os, helper\nprint("child cwd:", os.getcwd(), "|", helper.greeting())\n'


def make_scratch(root: Path) -> Path:
    root.mkdir(parents=True)
    (root / "train.py").write_text(TRAIN)
    (root / "helper.py").write_text(HELPER)
    (root / "child.py").write_text(CHILD)
    (root / "notes.log").write_text("ignored\n")
    (root / ".irisignore").write_text("*.log\n")
    return root


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[LocalCluster]:
    with LocalCluster(workers=0, state_dir=tmp_path / "cluster") as c:
        yield c


def submit_from(directory: Path, cluster: LocalCluster, *args: str) -> str:
    env = {**os.environ, "IRIS_CONTROLLER_URL": cluster.url}
    result = subprocess.run(
        [*IRIS, "job", "run", "--no-wait", "--json", *args],
        cwd=directory,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert "uploaded" in result.stderr
    return json.loads(result.stdout)["job_id"]


def start_far_worker(cluster: LocalCluster, base: Path) -> subprocess.Popen[bytes]:
    """A worker whose cwd and state dir are unrelated to where the job was submitted from."""
    cwd, state = base / "elsewhere", base / "far-state"
    cwd.mkdir(parents=True)
    argv = [
        sys.executable, "-m", "iris.cluster.worker", "--controller", cluster.url,
        "--worker-id", "far", "--state-dir", str(state), "--ready-file", str(base / "far.ready"),
    ]  # fmt: skip
    log = open(base / "far-worker.log", "wb")  # noqa: SIM115 - owned by the process below
    return subprocess.Popen(argv, cwd=cwd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)


def stop(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def test_worker_elsewhere_runs_the_job_and_its_sub_job_from_the_bundle(
    cluster: LocalCluster, tmp_path: Path
) -> None:
    scratch = make_scratch(tmp_path / "scratch")
    job_id = submit_from(scratch, cluster, "--env", "SPAWN_CHILD=1", "--", "python", "train.py")
    shutil.rmtree(scratch)  # gone before any worker exists: only the bundle can deliver the files
    worker = start_far_worker(cluster, tmp_path)
    try:
        with IrisClient(cluster.url) as client:
            job = client.job(job_id)
            detail = job.wait(timeout=90)
            lines = [line.line for line in job.log_lines()]
            assert detail.state is JobState.SUCCEEDED, (detail.error, lines)
            far_work = str(tmp_path / "far-state" / "work")
            cwd = next(line.removeprefix("cwd: ") for line in lines if line.startswith("cwd: "))
            assert Path(cwd).parent == Path(far_work)
            assert "helper says: hello from the bundle" in lines
            assert "child finished: SUCCEEDED" in lines
            assert any(line.startswith("unpacked bundle") for line in lines)
            assert not any("notes.log" in line for line in lines)

            (child,) = detail.children
            child_job = client.job(child)
            assert child_job.detail().spec.bundle_id == detail.spec.bundle_id  # inherited, not re-uploaded
            child_lines = [line.line for line in child_job.log_lines()]
            out = next(line for line in child_lines if line.startswith("child cwd:"))
            assert far_work in out and out.endswith("| hello from the bundle")
            # The bundle was fetched once for both attempts on this worker.
            cached = list((tmp_path / "far-state" / "bundles").glob("*.tar.gz"))
            assert [p.name for p in cached] == [f"{detail.spec.bundle_id}.tar.gz"]
            work = sorted(os.listdir(Path(cwd)))
            assert work == [".irisignore", "child.py", "helper.py", "train.py"]  # notes.log was ignored
    finally:
        stop(worker)


def test_unfetchable_bundle_fails_the_attempt_with_a_clear_log_line(
    cluster: LocalCluster, tmp_path: Path
) -> None:
    scratch = make_scratch(tmp_path / "scratch")
    job_id = submit_from(scratch, cluster, "--", "python", "train.py")
    stored = list((cluster.state_dir / "controller" / "bundles").glob("*.tar.gz"))
    assert len(stored) == 1
    stored[0].unlink()  # lost from the controller before a worker could fetch it
    worker = start_far_worker(cluster, tmp_path)
    try:
        with IrisClient(cluster.url) as client:
            job = client.job(job_id)
            detail = job.wait(timeout=60)
            assert detail.state is JobState.FAILED
            assert detail.error is not None and "could not fetch bundle" in detail.error
            lines = wait_until(
                lambda: [line.line for line in job.log_lines() if line.stream == "system"],
                what="the attempt's system log lines",
            )
            assert any(line.startswith("could not fetch bundle") and "404" in line for line in lines)
    finally:
        stop(worker)
