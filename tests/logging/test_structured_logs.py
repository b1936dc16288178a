"""Structured logs: JSON lines that parse and name the job/task they are about; rotating files."""

from __future__ import annotations

import json
import logging
import logging.handlers
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.conftest import wait_until

from iris.client import Entrypoint, IrisClient, JobState
from iris.client.local_cluster import LocalCluster
from iris.rpc.logging_setup import JsonFormatter, TextFormatter, configure_logging


def _record(msg: str, **extra: object) -> logging.LogRecord:
    record = logging.LogRecord("iris.test", logging.WARNING, __file__, 1, msg, (), None)
    record.__dict__.update(extra)
    return record


def test_json_line_carries_the_ids_it_is_about() -> None:
    line = JsonFormatter().format(_record("task failed", job_id="/u/j", task_id="/u/j/0", attempt_uid="ab12"))
    entry = json.loads(line)
    assert entry["msg"] == "task failed"
    assert (entry["level"], entry["logger"]) == ("WARNING", "iris.test")
    assert (entry["job_id"], entry["task_id"], entry["attempt_uid"]) == ("/u/j", "/u/j/0", "ab12")
    assert "worker_id" not in entry  # absent ids are left out, not null
    assert entry["ts"].endswith("Z") and entry["ts"][:2] == "20"


def test_json_line_includes_the_traceback() -> None:
    try:
        raise RuntimeError("boom")
    except RuntimeError:
        record = logging.LogRecord("iris.test", logging.ERROR, __file__, 1, "failed", (), None)
        record.exc_info = sys.exc_info()
    entry = json.loads(JsonFormatter().format(record))
    assert "RuntimeError: boom" in entry["exc"]
    assert "\n" not in JsonFormatter().format(record)  # still one line


def test_text_line_appends_ids() -> None:
    line = TextFormatter().format(_record("reaped", worker_id="w-1"))
    assert line.endswith("iris.test: reaped worker_id=w-1")


@pytest.fixture
def restore_root_logging() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    for h in list(root.handlers):
        root.removeHandler(h)
        h.close()
    for h in handlers:
        root.addHandler(h)
    root.setLevel(level)


@pytest.mark.usefixtures("restore_root_logging")
def test_log_file_rotates(tmp_path: Path) -> None:
    path = tmp_path / "logs" / "controller.log"
    configure_logging("json", path, max_bytes=2000, backups=2, environ={})
    log = logging.getLogger("iris.rotation")
    for i in range(200):
        log.info("line %d", i, extra={"job_id": f"/u/j{i}"})
    files = sorted(p.name for p in path.parent.iterdir())
    assert files == ["controller.log", "controller.log.1", "controller.log.2"]
    last = [json.loads(line) for line in path.read_text().splitlines()][-1]
    assert last == {**last, "msg": "line 199", "job_id": "/u/j199"}
    assert all(p.stat().st_size <= 2000 for p in path.parent.iterdir())


@pytest.mark.usefixtures("restore_root_logging")
def test_environment_picks_the_format_and_bad_values_are_refused(tmp_path: Path) -> None:
    handler = configure_logging(environ={"IRIS_LOG_FORMAT": "json", "IRIS_LOG_FILE": str(tmp_path / "x.log")})
    assert isinstance(handler.formatter, JsonFormatter)
    assert isinstance(handler, logging.handlers.RotatingFileHandler)
    with pytest.raises(ValueError, match="unknown log format"):
        configure_logging("yaml", environ={})
    with pytest.raises(ValueError, match="unknown log level"):
        configure_logging("text", level="LOUD", environ={})


def _json_lines(path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_real_cluster_writes_json_lines_about_tasks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("IRIS_LOG_FORMAT", "json")  # the worker daemons inherit it
    controller_log = tmp_path / "controller-json.log"
    cluster = LocalCluster(
        workers=1,
        state_dir=tmp_path / "state",
        controller_args=["--log-format", "json", "--log-file", str(controller_log)],
    )
    with cluster, IrisClient(cluster.url) as client:
        job = client.submit(Entrypoint.from_command("sh", "-c", "exit 4"), max_retries_failure=1)
        assert job.wait(timeout=30).state is JobState.FAILED
        entries = wait_until(
            lambda: (
                [
                    e
                    for e in _json_lines(controller_log)
                    if e.get("msg", "").startswith(f"job {job.job_id} FAILED")
                ]
                and _json_lines(controller_log)
            ),
            what="the job's end in the controller log",
        )
        about_task = [e for e in entries if e.get("task_id") == f"{job.job_id}/0"]
        assert len(about_task) == 2, entries  # the retry, then the final failure
        assert all(e["job_id"] == job.job_id and e["attempt_uid"] for e in about_task)
        assert [e["msg"].split()[2] for e in about_task] == ["PENDING", "FAILED"]
        assert any(e["msg"].startswith("controller serving at") for e in entries)
        worker_entries = wait_until(
            lambda: [e for e in _json_lines(cluster.workers[0].log_path) if e.get("attempt_uid")],
            what="JSON lines about attempts in the worker log",
        )
        assert {e["worker_id"] for e in worker_entries} == {"worker-0"}
        assert len({e["attempt_uid"] for e in worker_entries}) == 2  # each attempt ended once
