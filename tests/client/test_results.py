"""``Job.result()``: a callable's return values come back, one per task in task order; a failed
job raises ``JobFailed`` with the remote traceback's last line, the failure kind and the task."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from iris.client import Entrypoint, IrisClient, JobFailed, JobState, LocalCluster, ResourceSpec
from iris.rpc.models import MAX_RESULT_BYTES

SMALL = ResourceSpec(cpu=0.25, memory="256MB")


@pytest.fixture(scope="module")
def client() -> Iterator[IrisClient]:
    with LocalCluster(workers=1, worker_cpu="4", worker_memory="4GB") as lc, IrisClient(lc.url) as c:
        yield c


def double(x: int) -> int:
    return 2 * x


def per_task(scale: float) -> dict[str, float]:
    index = int(os.environ["IRIS_TASK_INDEX"])
    return {"task": index, "value": index * scale}


def diverge(lr: float) -> None:
    raise ValueError(f"loss is nan at lr={lr}")


def huge() -> bytes:
    return b"x" * (MAX_RESULT_BYTES + 1)


def uses_mylib() -> int:
    import mylib  # type: ignore[import-not-found]  # noqa: F401

    return 1


def test_result_returns_what_the_callable_returned(client: IrisClient) -> None:
    job = client.submit(Entrypoint.from_callable(double, 21), resources=SMALL)
    assert job.result(timeout=60) == [42]
    assert job.result() == [42], "read once, remembered"


def test_one_value_per_task_in_task_order(client: IrisClient) -> None:
    job = client.submit(Entrypoint.from_callable(per_task, 0.5), replicas=3, resources=SMALL)
    assert job.result(timeout=60) == [{"task": i, "value": i * 0.5} for i in range(3)]


def test_a_raising_callable_raises_job_failed_with_the_remote_traceback(client: IrisClient) -> None:
    job = client.submit(Entrypoint.from_callable(diverge, 0.3), resources=SMALL)
    with pytest.raises(JobFailed) as info:
        job.result(timeout=60)
    failed = info.value
    assert "ValueError: loss is nan at lr=0.3" in str(failed)
    assert failed.state is JobState.FAILED and failed.task_index == 0 and failed.kind == "exit_code"
    assert failed.remote_traceback is not None and "in diverge" in failed.remote_traceback
    with pytest.raises(JobFailed, match="loss is nan"):
        job.wait(timeout=60, raise_on_failure=True)
    assert job.wait(timeout=60).state is JobState.FAILED, "wait() alone still returns"


def test_a_result_over_the_bound_fails_the_task_saying_so(client: IrisClient) -> None:
    job = client.submit(Entrypoint.from_callable(huge), resources=SMALL)
    with pytest.raises(JobFailed, match=f"ResultTooLarge: .* at most {MAX_RESULT_BYTES} bytes per task"):
        job.result(timeout=60)


def test_a_missing_module_in_the_submitters_directory_gets_a_hint(
    client: IrisClient, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "mylib.py").write_text("X = 1\n")
    monkeypatch.chdir(tmp_path)
    job = client.submit(Entrypoint.from_callable(uses_mylib), resources=SMALL, workspace=False)
    with pytest.raises(JobFailed) as info:
        job.result(timeout=60)
    message = str(info.value)
    assert "ModuleNotFoundError: No module named 'mylib'" in message
    assert f"hint: {tmp_path / 'mylib.py'} is on this machine but not in the task's workspace" in message
    # With the workspace, the same callable imports it.
    assert client.submit(Entrypoint.from_callable(uses_mylib), resources=SMALL, workspace=True).result(
        60
    ) == [1]


def test_submit_packages_the_current_directory_by_default_as_the_cli_does(
    client: IrisClient, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import iris.client.client as client_module

    monkeypatch.setattr(client_module, "DEFAULT_WORKSPACE", True)  # the suite turns it off
    (tmp_path / "mylib.py").write_text("X = 7\n")
    monkeypatch.chdir(tmp_path)
    job = client.submit(Entrypoint.from_callable(uses_mylib), resources=SMALL)
    assert job.detail().spec.bundle_id, "the current directory went as the workspace"
    assert job.result(timeout=60) == [1]
