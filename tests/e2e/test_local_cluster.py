"""Journeys on a real local cluster: controller and worker daemons as processes over HTTP."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from tests.conftest import free_port, wait_until

from iris.client import Entrypoint, IrisClient, JobState, LocalCluster, ResourceSpec, TaskState
from iris.client.job import JobTimeout
from iris.rpc.errors import IrisError

IRIS = [sys.executable, "-m", "iris.cli.main"]


def greet(name: str) -> None:
    print(f"hello {name} from a callable")


def test_callable_runs_and_its_output_is_in_the_logs() -> None:
    with IrisClient.local(workers=1) as client:
        job = client.submit(
            name="greet",
            entrypoint=Entrypoint.from_callable(greet, "iris"),
            resources=ResourceSpec(cpu=0.5, memory="256MB"),
        )
        detail = job.wait(timeout=60)
        assert detail.state is JobState.SUCCEEDED, detail.error
        assert "hello iris from a callable" in job.logs()


def test_failing_callable_reports_the_exception() -> None:
    def boom() -> None:
        raise RuntimeError("the model diverged")

    with IrisClient.local(workers=1) as client:
        job = client.submit(
            name="boom",
            entrypoint=Entrypoint.from_callable(boom),
            resources=ResourceSpec(cpu=0.5, memory="256MB"),
        )
        detail = job.wait(timeout=60)
        assert detail.state is JobState.FAILED
        assert detail.exit_code == 1
        assert any("the model diverged" in line for line in job.logs())


@pytest.fixture
def cluster(tmp_path: Path):
    with LocalCluster(
        workers=2, state_dir=tmp_path, worker_cpu="2", worker_memory="2GB", worker_grace_s=3.0, tick_s=0.5
    ) as lc:
        yield lc


def test_cli_against_a_running_cluster(cluster: LocalCluster, tmp_path: Path) -> None:
    env = {**os.environ, "IRIS_CONTROLLER_URL": cluster.url}
    workdir = tmp_path / "workdir"  # not the repository: a uv project would sync its lock first
    workdir.mkdir()
    run = subprocess.run(
        [*IRIS, "job", "run", "--name", "hi", "--", "echo", "hi there"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        cwd=workdir,
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "hi there"
    workers = subprocess.run([*IRIS, "worker", "list"], capture_output=True, text=True, env=env, timeout=60)
    assert workers.returncode == 0
    assert "worker-0" in workers.stdout and "worker-1" in workers.stdout
    assert workers.stdout.count("HEALTHY") == 2
    assert "2 cpu" in workers.stdout
    listing = subprocess.run([*IRIS, "job", "list"], capture_output=True, text=True, env=env, timeout=60)
    assert "/hi" in listing.stdout and "SUCCEEDED" in listing.stdout
    unknown = subprocess.run(
        [*IRIS, "job", "status", "/nobody/nothing"], capture_output=True, text=True, env=env, timeout=60
    )
    assert unknown.returncode == 1
    assert "job /nobody/nothing does not exist" in unknown.stderr


def test_killed_worker_task_retries_elsewhere(cluster: LocalCluster) -> None:
    client = IrisClient(cluster.url)
    job = client.submit(
        name="survivor",
        entrypoint=Entrypoint.from_command(
            "sh", "-c", 'if [ "$IRIS_ATTEMPT_NUMBER" = 0 ]; then sleep 600; fi; echo done'
        ),
        resources=ResourceSpec(cpu=1, memory="128MB"),
    )
    first = wait_until(
        lambda: next((t for t in job.tasks() if t.state is TaskState.RUNNING), None), what="task running"
    )
    victim = next(w for w in cluster.workers if w.name == first.worker_id)
    os.kill(victim.proc.pid, signal.SIGKILL)

    def shown_unhealthy() -> bool:
        return any(
            w.worker_id == first.worker_id and w.status.value != "HEALTHY" for w in client.workers().workers
        )

    wait_until(shown_unhealthy, timeout=30, what="dead worker shown unhealthy")
    detail = job.wait(timeout=60)
    assert detail.state is JobState.SUCCEEDED
    task = detail.tasks[0]
    assert [a.state for a in task.attempts] == [TaskState.WORKER_FAILED, TaskState.SUCCEEDED]
    assert task.attempts[1].worker_id != first.worker_id
    assert task.preemption_count == 1
    wait_until(
        lambda: first.worker_id not in {w.worker_id for w in client.workers().workers},
        timeout=30,
        what="dead worker removed",
    )


def _spawn(argv: list[str], log: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(argv, stdout=log.open("ab"), stderr=subprocess.STDOUT, start_new_session=True)


def test_controller_restart_keeps_jobs_and_running_tasks(tmp_path: Path) -> None:
    """`iris controller start` + two `iris worker start`; restart the controller mid-task."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    state = tmp_path / "controller"
    controller_argv = [
        *IRIS,
        "controller",
        "start",
        "--port",
        str(port),
        "--state-dir",
        str(state),
        "--tick",
        "0.5",
    ]
    controller = _spawn(controller_argv, tmp_path / "controller.log")
    workers = [
        _spawn(
            [*IRIS, "worker", "start", "--controller", url, "--worker-id", f"w{i}", "--cpu", "2", "--memory", "2GB",
             "--state-dir", str(tmp_path / f"w{i}"), "--reregister-after", "1"],
            tmp_path / f"w{i}.log",
        )
        for i in range(2)
    ]  # fmt: skip
    client = IrisClient(url)
    try:
        wait_until(lambda: _count_workers(client) == 2, timeout=60, what="two workers registered")
        marker = tmp_path / "go"
        done = client.submit(
            name="before",
            entrypoint=Entrypoint.from_command("true"),
            resources=ResourceSpec(cpu=0.5, memory="64MB"),
        )
        done.wait(timeout=30)
        job = client.submit(
            name="long",
            entrypoint=Entrypoint.from_command(
                "sh", "-c", f"echo started; while [ ! -e {marker} ]; do sleep 0.05; done; echo finished"
            ),
            resources=ResourceSpec(cpu=1, memory="64MB"),
        )
        wait_until(
            lambda: job.status() is JobState.RUNNING and "started" in job.logs(), what="long task running"
        )
        uid = job.tasks()[0].current_attempt_uid

        controller.send_signal(signal.SIGTERM)
        assert controller.wait(timeout=30) == 0
        controller = _spawn(controller_argv, tmp_path / "controller.log")
        wait_until(lambda: _count_workers(client) == 2, timeout=60, what="workers re-registered on their own")
        jobs = {j.job_id: j.state for j in client.list_jobs().jobs}
        assert jobs[done.job_id] is JobState.SUCCEEDED
        assert jobs[job.job_id] is JobState.RUNNING
        marker.touch()
        detail = job.wait(timeout=60)
        assert detail.state is JobState.SUCCEEDED
        assert [a.attempt_uid for a in detail.tasks[0].attempts] == [uid]  # it continued, never restarted
        assert "finished" in job.logs()
    finally:
        for proc in [*workers, controller]:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in [*workers, controller]:
            proc.wait(timeout=30)


def _count_workers(client: IrisClient) -> int:
    try:
        return len(client.workers().workers)
    except IrisError:
        return -1  # the controller is not up yet


def test_task_events_name_the_worker(cluster: LocalCluster) -> None:
    client = IrisClient(cluster.url)
    job = client.submit(
        name="evented",
        entrypoint=Entrypoint.from_command("true"),
        resources=ResourceSpec(cpu=0.5, memory="64MB"),
    )
    assert job.wait(timeout=60).state is JobState.SUCCEEDED
    events = client.http.request("GET", f"/api/v1/jobs{job.job_id}:events")["events"]
    finished = [e for e in events if e["kind"] == "task_succeeded"]
    assert finished and finished[0]["worker_id"] == job.tasks()[0].worker_id


def test_a_job_wait_is_held_by_the_controller_and_answered_when_the_job_ends() -> None:
    with IrisClient.local(workers=1) as client:
        job = client.submit(
            Entrypoint.from_command("sleep", "1"), name="held", resources=ResourceSpec(cpu=0.5, memory="64MB")
        )
        path = f"/api/v1/jobs/{job.job_id.lstrip('/')}"
        t0 = time.monotonic()
        held = client.http.request("GET", path, params={"task_limit": 0, "wait_s": 30}, timeout=60)
        waited = time.monotonic() - t0
        assert held["state"] == "SUCCEEDED" and 0.5 < waited < 20, (held["state"], waited)
        # Not over: the answer comes once ``wait_s`` has passed, with the job as it is then.
        sleeper = client.submit(
            Entrypoint.from_command("sleep", "600"),
            name="long",
            resources=ResourceSpec(cpu=0.5, memory="64MB"),
        )
        t0 = time.monotonic()
        detail = sleeper.detail(task_limit=0)
        page = client.http.request(
            "GET", f"/api/v1/jobs/{sleeper.job_id.lstrip('/')}", params={"task_limit": 0, "wait_s": 0.5}
        )
        assert page["state"] in ("PENDING", "RUNNING") and time.monotonic() - t0 >= 0.5, page["state"]
        assert detail.state in (JobState.PENDING, JobState.RUNNING)
        with pytest.raises(JobTimeout):
            sleeper.wait(timeout=1)
        sleeper.kill()
        assert sleeper.wait(timeout=30).state is JobState.KILLED
