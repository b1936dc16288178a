"""`iris cluster start --config`: scale groups bring workers up for demand and take them down when idle."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

from tests.conftest import wait_until

from iris.client import Entrypoint, IrisClient, JobState, ResourceSpec
from iris.cluster.controller.backend import BackendDescriptor, BackendKind, dashboard_backend_descriptor
from iris.cluster.controller.controller import create_controller

IRIS = [sys.executable, "-m", "iris.cli.main"]

CONFIG = """
controller:
  port: 0
  state_dir: {state}
backend:
  kind: worker-daemon
  backend_id: local
  display_name: Autoscaled local
platform:
  kind: local
scale_groups:
  {groups}
defaults:
  autoscaler:
    evaluation_interval_s: 0.5
    scale_down_delay_s: 3
    boot_timeout_s: 30
    backoff: {{failure_threshold: 2, window_s: 60, initial_s: 30, max_s: 60}}
  worker:
    reconcile_interval_s: 0.5
    unreachable_grace_s: 10
"""

ONE_GROUP = "small: {resources: {cpu: 1, memory: 1GB}, min_slices: 0, max_slices: 3, num_vms: 1}"
TWO_GROUPS = (
    "broken: {resources: {cpu: 1, memory: 1GB}, max_slices: 2, priority: 1, local: {fail_boot: true}}\n"
    "  backup: {resources: {cpu: 1, memory: 1GB}, max_slices: 2, priority: 2}"
)


def start(tmp_path: Path, groups: str) -> tuple[subprocess.Popen[str], str]:
    config = tmp_path / "cluster.yaml"
    config.write_text(CONFIG.format(state=tmp_path / "state", groups=groups))
    proc = subprocess.Popen(
        [*IRIS, "cluster", "start", "--local", "--config", str(config)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert proc.stdout is not None
    for line in proc.stdout:
        match = re.search(r"controller: (http://\S+)", line)
        if match:
            return proc, match.group(1)
    raise AssertionError(f"cluster did not start (exit {proc.wait()})")


def stop(proc: subprocess.Popen[str]) -> None:
    proc.send_signal(signal.SIGINT)
    proc.wait(timeout=60)


def status_json(url: str) -> dict[str, object]:
    out = subprocess.run(
        [*IRIS, "cluster", "status", "--json"],
        capture_output=True,
        text=True,
        env={**os.environ, "IRIS_CONTROLLER_URL": url},
        check=True,
    )
    return json.loads(out.stdout)


def test_scale_from_zero_to_three_and_back(tmp_path: Path) -> None:
    proc, url = start(tmp_path, ONE_GROUP)
    try:
        client = IrisClient(url)
        assert client.workers().workers == []
        assert status_json(url)["capabilities"] == ["workers", "autoscaler"]
        # Each task waits until all three run at once, so the job needs three one-cpu workers
        # together however slowly they start (one worker cannot run them one after another).
        barrier = tmp_path / "barrier"
        barrier.mkdir()
        os.chmod(barrier, 0o1777)  # attempts may run as uids of their own
        wait_for_all = (
            f"touch {barrier}/$IRIS_TASK_INDEX; for i in $(seq 1200); do"
            f' [ "$(ls {barrier} | wc -l)" -ge 3 ] && exit 0; sleep 0.1; done; exit 1'
        )
        job = client.submit(
            Entrypoint.from_command("sh", "-c", wait_for_all),
            name="three",
            replicas=3,
            resources=ResourceSpec(cpu=1, memory="256MB"),
        )
        wait_until(
            lambda: len(client.workers().workers) == 3,
            timeout=60,
            what="three workers started by the autoscaler",
        )
        human = subprocess.run(
            [*IRIS, "cluster", "status"],
            capture_output=True,
            text=True,
            env={**os.environ, "IRIS_CONTROLLER_URL": url},
        ).stdout
        assert "small" in human and "scale_up" in human
        assert job.wait(timeout=120).state is JobState.SUCCEEDED
        assert len({t.worker_id for t in job.tasks()}) == 3
        wait_until(
            lambda: client.workers().workers == [], timeout=60, what="group back to zero after the idle delay"
        )
        view = client.http.request("GET", "/api/v1/autoscaler")
        actions = [a["action"] for a in view["actions"]]
        assert actions.count("scale_up") == 3 and actions.count("scale_down") == 3
        assert view["groups"][0]["slices_by_state"]["READY"] == 0
    finally:
        stop(proc)


def test_failing_group_backs_off_and_demand_moves_on(tmp_path: Path) -> None:
    proc, url = start(tmp_path, TWO_GROUPS)
    try:
        client = IrisClient(url)
        job = client.submit(
            Entrypoint.from_command("true"), name="fallback", resources=ResourceSpec(cpu=1, memory="256MB")
        )
        assert job.wait(timeout=90).state is JobState.SUCCEEDED
        worker = job.tasks()[0].worker_id or ""
        assert worker.startswith("backup-")
        groups = {g["name"]: g for g in client.http.request("GET", "/api/v1/autoscaler")["groups"]}
        assert groups["broken"]["in_backoff"]
        assert "boot" in groups["broken"]["backoff_reason"]
    finally:
        stop(proc)


def test_capabilities_follow_the_autoscaler_configuration() -> None:
    descriptor = BackendDescriptor(backend_id="w", kind=BackendKind.WORKER)
    assert dashboard_backend_descriptor(create_controller(descriptor)).capabilities == ["workers"]
    assert dashboard_backend_descriptor(create_controller(descriptor, autoscaler=object())).capabilities == [
        "workers",
        "autoscaler",
    ]


def test_a_job_no_group_can_fit_is_rejected_at_submit(tmp_path: Path) -> None:
    proc, url = start(tmp_path, ONE_GROUP)
    try:
        out = subprocess.run(
            [*IRIS, "job", "run", "--cpu", "64", "--", "true"],
            capture_output=True,
            text=True,
            env={**os.environ, "IRIS_CONTROLLER_URL": url},
        )
        assert out.returncode == 1
        assert "no scale group can ever run this job" in out.stderr and "cpu" in out.stderr
    finally:
        stop(proc)


def test_zone_is_checked_against_scale_groups_before_any_worker_exists(tmp_path: Path) -> None:
    """With no worker up yet, --zone knows the zones the scale groups will start workers in."""
    groups = "east: {resources: {cpu: 1, memory: 1GB}, min_slices: 0, max_slices: 1, attributes: {zone: us-east1-b}}"
    proc, url = start(tmp_path, groups)
    try:
        env = {**os.environ, "IRIS_CONTROLLER_URL": url}

        def run(*args: str) -> subprocess.CompletedProcess[str]:
            return subprocess.run(
                [*IRIS, *args], capture_output=True, text=True, env=env, timeout=180, cwd=tmp_path
            )

        typo = run("job", "run", "--no-workspace", "--zone", "us-east1-c", "--", "true")
        assert typo.returncode == 2
        assert "did you mean us-east1-b?" in typo.stderr
        ok = run("job", "run", "--no-workspace", "--no-wait", "--zone", "us-east1-b", "--", "true")
        assert ok.returncode == 0, ok.stderr
    finally:
        stop(proc)
