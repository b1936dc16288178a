"""iris.client.distributed() without a cluster: outside a task, a one-task job, names, torch env."""

from __future__ import annotations

import pytest

from iris.client import Distributed, distributed
from iris.client.distributed import coordinator_endpoint_name
from iris.rpc.errors import FailedPrecondition


def test_outside_a_task_it_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("IRIS_JOB_ID", raising=False)
    with pytest.raises(FailedPrecondition, match="not running inside an Iris task"):
        distributed()


def test_a_one_task_job_coordinates_itself_without_the_controller(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("IRIS_JOB_ID", "/alice/solo")
    monkeypatch.setenv("IRIS_CONTROLLER_URL", "http://127.0.0.1:1")  # nothing listens: no call is made
    monkeypatch.setenv("IRIS_TASK_INDEX", "0")
    monkeypatch.setenv("IRIS_NUM_TASKS", "1")
    monkeypatch.setenv("IRIS_PORT_COORDINATOR", "4567")
    d = distributed()
    assert d == Distributed("127.0.0.1:4567", 0, 1)


def test_a_bad_task_count_is_one_sentence(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("IRIS_JOB_ID", "/alice/solo")
    monkeypatch.setenv("IRIS_CONTROLLER_URL", "http://127.0.0.1:1")
    monkeypatch.setenv("IRIS_NUM_TASKS", "four")
    with pytest.raises(FailedPrecondition, match="IRIS_NUM_TASKS is not a number"):
        distributed()


def test_endpoint_names_fit_the_limit_and_torch_env() -> None:
    assert coordinator_endpoint_name("/alice/train") == "coordinator/alice/train"
    long_name = coordinator_endpoint_name("/alice/" + "x" * 200)
    assert len(long_name) <= 128 and long_name.startswith("coordinator/")
    d = Distributed("10.0.0.5:8476", 2, 4)
    assert d.torch_env == {"MASTER_ADDR": "10.0.0.5", "MASTER_PORT": "8476", "RANK": "2", "WORLD_SIZE": "4"}


def test_the_readme_gang_example_asks_for_the_port_distributed_looks_for() -> None:
    from pathlib import Path

    from iris.client.distributed import COORDINATOR_PORT_NAME

    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    gangs = [line for line in readme.splitlines() if "--group-by" in line and "--port" in line]
    assert gangs and all(f"--port {COORDINATOR_PORT_NAME} " in line for line in gangs), gangs
