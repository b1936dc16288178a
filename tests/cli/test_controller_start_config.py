"""``iris controller start --config FILE`` listens where the file says and keeps state there;
the flags still win."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import httpx
from tests.conftest import free_port, wait_until

IRIS = [sys.executable, "-m", "iris.cli.main"]


def _up(port: int) -> bool:
    try:
        return httpx.get(f"http://127.0.0.1:{port}/api/v1/jobs", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def _run_until_up(argv: list[str], port: int, log: Path) -> None:
    proc = subprocess.Popen(argv, stdout=log.open("ab"), stderr=subprocess.STDOUT, start_new_session=True)
    try:
        wait_until(lambda: _up(port) or proc.poll() is not None, timeout=60, what=f"a controller on {port}")
        assert proc.poll() is None, log.read_text()
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def test_config_sets_port_and_state_dir_and_flags_override(tmp_path: Path) -> None:
    port = free_port()
    state = tmp_path / "from-config"
    config = tmp_path / "cluster.yaml"
    config.write_text(f"controller:\n  port: {port}\n  state_dir: {state}\n")
    log = tmp_path / "controller.log"
    _run_until_up([*IRIS, "controller", "start", "--config", str(config)], port, log)
    assert f"controller starting on http://127.0.0.1:{port} (state in {state})" in log.read_text()
    assert any(state.iterdir()), "the database lives in the config's state_dir"

    other_port, other_state = free_port(), tmp_path / "from-flag"
    _run_until_up(
        [*IRIS, "controller", "start", "--config", str(config), "--port", str(other_port),
         "--state-dir", str(other_state)],
        other_port,
        log,
    )  # fmt: skip
    assert any(other_state.iterdir()), "--state-dir wins over the config"
