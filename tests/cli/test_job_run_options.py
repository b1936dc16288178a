"""``iris job run`` flags reach the job spec and the scheduler, run as a user runs them."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.cli.helpers import run_iris
from tests.conftest import wait_until

from iris.client import IrisClient
from iris.client.local_cluster import LocalCluster


@pytest.fixture(scope="module")
def cluster() -> Iterator[LocalCluster]:
    zones = [{"zone": "us-east1-b", "rack": "r1"}, {"zone": "europe-west4-a", "rack": "r1"}]
    with LocalCluster(workers=2, worker_cpu="4", worker_memory="8GB", worker_attributes=zones) as lc:
        yield lc


def _submit(cluster: LocalCluster, cwd: Path, *flags: str) -> dict:
    result = run_iris(
        cluster, cwd, "job", "run", "--no-workspace", "--no-wait", "--json", *flags, "--", "true"
    )
    assert result.returncode == 0, result.stderr
    job_id = json.loads(result.stdout)["job_id"]
    detail = run_iris(cluster, cwd, "job", "status", "--json", job_id)
    assert detail.returncode == 0, detail.stderr
    return json.loads(detail.stdout)


def test_every_option_reaches_the_spec(cluster: LocalCluster, workdir: Path) -> None:
    spec = _submit(
        cluster,
        workdir,
        "--name", "opts",
        "--constraint", "zone in (us-east1-b,europe-west4-a)",
        "--constraint", "!spot",
        "--constraint", "rack",
        "--prefer", "zone=europe-west4-a",
        "--port", "coord",
        "--port", "metrics",
        "--memory", "256",
        "--timeout", "1:00:00",
        "--scheduling-timeout", "90s",
        "--replicas", "2",
        "--group-by", "rack",
        "--max-task-failures", "3",
    )["spec"]  # fmt: skip
    assert [c["op"] for c in spec["constraints"]] == ["IN", "NOT_EXISTS", "EXISTS"]
    assert spec["preferences"] == [{"key": "zone", "op": "EQ", "value": "europe-west4-a", "values": []}]
    assert spec["ports"] == ["coord", "metrics"]
    assert spec["resources"]["memory_bytes"] == 256 * 1000**2
    assert spec["timeout_s"] == 3600 and spec["scheduling_timeout_s"] == 90
    assert spec["coscheduling"] == {"group_by": "rack"}
    assert spec["max_task_failures"] == 3


def test_gpu_and_device_flags_become_the_device_request(cluster: LocalCluster, workdir: Path) -> None:
    # No worker here has a GPU: --wait-for-capacity queues the job instead of refusing it.
    queue = ("--scheduling-timeout", "1s", "--wait-for-capacity")
    gpu = _submit(cluster, workdir, "--gpu", "a100:2", *queue)["spec"]["resources"]
    assert gpu["device"] == {"type": "gpu", "variant": "a100", "count": 2}
    device = _submit(cluster, workdir, "--device", "gpu:4", *queue)["spec"]["resources"]
    assert device["device"] == {"type": "gpu", "variant": "", "count": 4}


def test_prefer_places_where_it_holds_and_never_blocks(
    cluster: LocalCluster, client: IrisClient, workdir: Path
) -> None:
    for zone in ("europe-west4-a", "us-east1-b"):
        job_id = _submit(cluster, workdir, "--prefer", f"zone={zone}")["job_id"]
        wait_until(lambda j=job_id: client.job(j).detail().tasks[0].worker_id is not None, what="placed")
        worker_id = client.job(job_id).detail().tasks[0].worker_id
        zones = {w.worker_id: w.attributes["zone"] for w in client.workers().workers}
        assert zones[worker_id] == zone
    nowhere = _submit(cluster, workdir, "--prefer", "zone=mars")["job_id"]
    wait_until(lambda: client.job(nowhere).detail().tasks[0].worker_id is not None, what="placed anyway")


def test_zone_is_a_constraint_checked_against_what_workers_advertise(
    cluster: LocalCluster, workdir: Path
) -> None:
    spec = _submit(cluster, workdir, "--zone", "us-east1-b")["spec"]
    assert {"key": "zone", "op": "EQ", "value": "us-east1-b", "values": []} in spec["constraints"]
    typo = run_iris(cluster, workdir, "job", "run", "--zone", "us-east1-c", "--", "true")
    assert typo.returncode == 2
    assert "no worker is in zone 'us-east1-c'; did you mean us-east1-b?" in typo.stderr
    assert len(typo.stderr.strip().splitlines()) == 1, typo.stderr
    region = run_iris(cluster, workdir, "job", "run", "--region", "us-east1", "--", "true")
    assert region.returncode == 2 and "no worker advertises a region" in region.stderr


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--constraint", "mem>=lots"], "'--constraint'"),
        (["--timeout", "soon"], "is not a duration"),
        (["--gpu", "0"], "between 1 and 1024"),
        (["--gpu", "1", "--device", "gpu:1"], "give one of --gpu, --tpu and --device"),
        (["--tpu", "v5litepod-8"], "no worker offers a TPU"),
        (["--port", "a b"], "not a port name"),
        (["--name", "a b"], "--name"),
        (["--memory", "2000000000GB"], "--memory:"),
    ],
)
def test_bad_options_are_one_line_naming_the_flag(
    cluster: LocalCluster, workdir: Path, flags: list[str], message: str
) -> None:
    result = run_iris(cluster, workdir, "job", "run", *flags, "--", "true")
    assert result.returncode != 0
    assert message in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert "Traceback" not in result.stderr and "pydantic" not in result.stderr


def test_controller_is_accepted_after_the_subcommand(cluster: LocalCluster, workdir: Path) -> None:
    env_less = run_iris(cluster, workdir, "job", "list", "--controller", "http://127.0.0.1:9")
    assert env_less.returncode != 0 and "127.0.0.1:9" in env_less.stderr
    ok = run_iris(cluster, workdir, "worker", "list", "--controller", cluster.url)
    assert ok.returncode == 0 and "us-east1-b" in ok.stdout


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("localhost:10000", "has no scheme; write http://localhost:10000"),
        ("ftp://host:1", "must start with http:// or https://"),
        ("http://host:port", "port that is not a number"),
    ],
)
def test_bad_controller_urls_say_what_is_wrong(
    cluster: LocalCluster, workdir: Path, url: str, message: str
) -> None:
    result = run_iris(cluster, workdir, "--controller", url, "job", "list")
    assert result.returncode == 2
    assert message in result.stderr and "Traceback" not in result.stderr


def test_a_timeout_exits_124_and_status_says_timeout(cluster: LocalCluster, workdir: Path) -> None:
    run = run_iris(
        cluster,
        workdir,
        "job",
        "run",
        "--no-workspace",
        "--name",
        "to",
        "--timeout",
        "1s",
        "--",
        "sleep",
        "30",
    )
    assert run.returncode == 124, run.stderr
    assert "FAILED (TIMEOUT)" in run.stderr and "timed out after 1s" in run.stderr
    status = run_iris(cluster, workdir, "job", "status", "to")
    assert status.returncode == 0, status.stderr
    assert "FAILED (TIMEOUT)" in status.stdout and "exit code: 124" in status.stdout
    detail = json.loads(run_iris(cluster, workdir, "job", "status", "--json", "to").stdout)
    assert detail["tasks"][0]["failure"]["kind"] == "timeout"


def test_pip_takes_a_requirements_file_from_the_workspace(cluster: LocalCluster, workdir: Path) -> None:
    (workdir / "requirements.txt").write_text("# pinned\nsix==1.16.0  # small\n\n-r extra.txt\n")
    (workdir / "extra.txt").write_text("attrs>=23\n")
    spec = _submit_with(cluster, workdir, "--pip", "-r", "requirements.txt", "--pip", "rich")
    assert spec["environment"]["pip_packages"] == ["six==1.16.0", "attrs>=23", "rich"]
    assert spec["entrypoint"]["argv"] == ["true"], "the file name is not taken for the command"
    assert spec["bundle_id"], "the file travels in the workspace bundle"
    (workdir / "bad.txt").write_text("--index-url https://example.com/simple\nsix\n")
    bad = run_iris(cluster, workdir, "job", "run", "--no-wait", "--pip", "-r", "bad.txt", "--", "true")
    assert bad.returncode == 2
    assert "bad.txt line 1: --index-url is an installer option; Iris takes requirements only" in bad.stderr
    missing = run_iris(cluster, workdir, "job", "run", "--no-wait", "--pip=-r=nope.txt", "--", "true")
    assert missing.returncode == 2 and "cannot read requirements file nope.txt" in missing.stderr


def _submit_with(cluster: LocalCluster, cwd: Path, *flags: str) -> dict:
    """Submit ``true`` with the workspace and ``flags``, stop it, and return its spec."""
    result = run_iris(cluster, cwd, "job", "run", "--no-wait", "--json", *flags, "--", "true")
    assert result.returncode == 0, result.stderr
    job_id = json.loads(result.stdout)["job_id"]
    run_iris(cluster, cwd, "job", "stop", job_id)
    detail = run_iris(cluster, cwd, "job", "status", "--json", job_id)
    assert detail.returncode == 0, detail.stderr
    return json.loads(detail.stdout)["spec"]
