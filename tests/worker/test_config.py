"""Worker flags: parsing into WorkerConfig, and one-sentence errors with exit code 2 at both entry points."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from iris.cli.worker_cmd import worker as worker_group
from iris.cluster.worker.config import (
    WorkerConfigError,
    build_worker_config,
    default_worker_id,
    worker_capacity,
)


def test_flags_are_parsed_into_canonical_units(tmp_path: Path) -> None:
    config = build_worker_config(
        controller="http://ctl:10000/",
        port="8080",
        cpu="0.5",
        memory="4GB",
        disk="10Gi",
        attrs=["zone=a", "pool = big "],
        device="gpu:h100:8",
        reregister_after="2.5",
        environ={"IRIS_WORKER_ATTRIBUTES": "rack=r1,zone=ignored"},
    )
    assert config.controller_url == "http://ctl:10000"
    assert (config.port, config.cpu_millicores, config.memory_bytes) == (8080, 500, 4 * 1000**3)
    assert config.disk_bytes == 10 * 1024**3
    assert dict(config.attributes) == {"rack": "r1", "zone": "a", "pool": "big"}
    assert config.device is not None and (config.device.type, config.device.variant, config.device.count) == (
        "gpu",
        "h100",
        8,
    )
    assert config.reregister_after_s == 2.5
    capacity = worker_capacity(config, tmp_path)
    assert capacity.cpu_millicores == 500 and capacity.device == config.device


def test_controller_comes_from_the_environment() -> None:
    config = build_worker_config(controller=None, environ={"IRIS_CONTROLLER_URL": "http://c:1"})
    assert config.controller_url == "http://c:1" and config.cpu_millicores is None


def test_default_capacity_is_the_whole_machine(tmp_path: Path) -> None:
    capacity = worker_capacity(build_worker_config(controller="http://c:1", environ={}), tmp_path)
    assert capacity.cpu_millicores >= 1000 and capacity.memory_bytes > 0 and capacity.disk_bytes > 0


def test_default_worker_id_is_a_valid_id() -> None:
    worker_id = default_worker_id(43210)
    assert worker_id.endswith("-43210")
    build_worker_config(controller="http://c:1", worker_id=worker_id, environ={})


@pytest.mark.parametrize(
    ("flags", "fragment"),
    [
        ({"controller": None}, "no controller given"),
        ({"controller": "ctl:1000"}, "must be an http"),
        ({"cpu": "lots"}, "--cpu 'lots' is not a valid amount"),
        ({"memory": "-3GB"}, "--memory"),
        ({"device": "gpu"}, "type:variant:count"),
        ({"device": "gpu:a100:0"}, "count between 1 and 1024"),
        ({"attrs": ["novalue"]}, "key=value"),
        ({"port": "http"}, "--port must be a number"),
        ({"port": "70000"}, "between 0 and 65535"),
        ({"worker_id": "bad id!"}, "--worker-id"),
        ({"reregister_after": "0"}, "must be positive"),
    ],
)
def test_bad_flags_raise_one_sentence(flags: dict, fragment: str) -> None:
    base = {"controller": "http://c:1", "environ": {}}
    with pytest.raises(WorkerConfigError) as err:
        build_worker_config(**{**base, **flags})
    assert fragment in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize(
    "argv",
    [
        ["--controller", "http://127.0.0.1:1", "--cpu", "lots"],
        ["--controller", "http://127.0.0.1:1", "--no-such-flag"],
        ["--cpu", "1"],
    ],
)
def test_module_entry_point_rejects_bad_flags_with_exit_2(argv: list[str], tmp_path: Path) -> None:
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    done = subprocess.run(
        [sys.executable, "-m", "iris.cluster.worker", *argv],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert done.returncode == 2
    assert len(done.stderr.strip().splitlines()) == 1 and "Traceback" not in done.stderr


def test_module_entry_point_reports_a_busy_port_in_one_line(tmp_path: Path) -> None:
    import socket

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "iris.cluster.worker",
                "--controller",
                "http://127.0.0.1:1",
                "--port",
                str(port),
            ],
            capture_output=True,
            text=True,
            timeout=60,
            env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)},
        )
    assert done.returncode == 2 and "cannot listen on" in done.stderr and "Traceback" not in done.stderr


@pytest.mark.parametrize(
    ("argv", "fragment"),
    [
        (["start", "--controller", "http://c:1", "--memory", "lots"], "--memory 'lots'"),
        (["start", "--controller", "http://c:1", "--bogus"], "No such option"),
        (["start", "--controller", "http://c:1", "--attr"], "requires an argument"),
    ],
)
def test_click_command_rejects_bad_flags_with_exit_2(argv: list[str], fragment: str) -> None:
    result = CliRunner().invoke(worker_group, argv, env={"IRIS_CONTROLLER_URL": ""})
    assert result.exit_code == 2
    output = result.output.strip()
    assert fragment in output and len(output.splitlines()) == 1 and "Traceback" not in output
