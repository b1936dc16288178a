"""``--also-listen HOST``: the controller serves on a second address, on the same port (a local
real node's pods reach it on the host end of the node's veth). Beyond loopback it takes callers by
token only: without auth it refuses to start, with one sentence."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from tests.conftest import wait_until

# Another loopback address (all of 127/8 is this machine's): a second address without root.
SECOND = "127.0.0.2"


@pytest.fixture
def procs() -> Iterator[list[subprocess.Popen[bytes]]]:
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for proc in started:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def _start(tmp_path: Path, env: dict[str, str], *args: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "iris.cluster.controller", "--port", "0",
         "--state-dir", str(tmp_path / "state"), "--ready-file", str(tmp_path / "ready"), *args],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True, env={**os.environ, **env},
    )  # fmt: skip


def test_an_open_controller_refuses_to_listen_beyond_loopback(
    tmp_path: Path, procs: list[subprocess.Popen[bytes]]
) -> None:
    proc = _start(tmp_path, {}, "--also-listen", SECOND)
    procs.append(proc)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 1
    assert err.decode().strip().splitlines() == [
        f"error: --also-listen {SECOND} needs auth: configure auth.tokens (or start the local cluster"
        " without --no-auth); an open controller listens on loopback only"
    ]
    assert not (tmp_path / "ready").exists()


def test_the_second_address_serves_the_same_controller_by_token(
    tmp_path: Path, procs: list[subprocess.Popen[bytes]]
) -> None:
    token = "t0ken-for-the-test"
    env = {"IRIS_CONTROLLER_LOCAL_TOKEN": token, "IRIS_CONTROLLER_LOCAL_USER": "alice"}
    proc = _start(tmp_path, env, "--also-listen", SECOND, "--advertise-url", f"http://{SECOND}:1")
    procs.append(proc)
    wait_until(lambda: (tmp_path / "ready").exists() or proc.poll() is not None, timeout=60, what="ready")
    assert proc.poll() is None, proc.stderr.read().decode() if proc.stderr else ""
    url = json.loads((tmp_path / "ready").read_text())["url"]
    port = url.rsplit(":", 1)[1]
    assert url == f"http://127.0.0.1:{port}"
    second = f"http://{SECOND}:{port}"
    auth = {"Authorization": f"Bearer {token}"}
    assert httpx.get(f"{second}/api/v1/jobs", timeout=30).status_code == 401
    assert httpx.get(f"{second}/api/v1/jobs", headers=auth, timeout=30).status_code == 200
