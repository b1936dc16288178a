"""A local cluster with auth on (an admin, alice, bob and a worker token) for the end-to-end suites,
and the CLI run as one of those users."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from iris.client import LocalCluster

IRIS = [sys.executable, "-m", "iris.cli.main"]
ADMIN, ALICE, BOB, WORKER = "admin-token-123", "alice-token-123", "bob-token-12345", "worker-token-123"
TOKENS = f"""
auth:
  tokens:
    - {{token: {ADMIN}, role: admin}}
    - {{token: {ALICE}, role: user, user: alice}}
    - {{token: {BOB}, role: user, user: bob}}
    - {{token: {WORKER}, role: worker}}
"""


def cluster_config(state_dir: Path, backend_id: str, extra_config: str = "") -> str:
    """A cluster config file's text: a worker-daemon controller on a free port with the tokens."""
    return (
        f"controller: {{port: 0, state_dir: {state_dir}}}\n"
        f"backend: {{kind: worker-daemon, backend_id: {backend_id}}}\n{extra_config}{TOKENS}"
    )


@contextmanager
def secure_cluster(root: Path, backend_id: str, extra_config: str = "") -> Iterator[LocalCluster]:
    """One controller (config: ``extra_config`` plus the tokens) and one worker, stopped on exit."""
    config = root / "cluster.yaml"
    config.write_text(cluster_config(root / "state", backend_id, extra_config))
    cluster = LocalCluster(
        workers=0, state_dir=root, controller_args=["--config", str(config)], token=ADMIN, worker_token=WORKER
    )
    cluster.start()
    try:
        cluster.add_worker(0)
        yield cluster
    finally:
        cluster.stop()


def iris(
    cluster: LocalCluster, token: str, *args: str, stdin: str = "", **env: str
) -> subprocess.CompletedProcess[str]:
    """The CLI against ``cluster`` as the holder of ``token``."""
    full_env = {
        **os.environ,
        "IRIS_CONTROLLER_URL": cluster.url,
        "IRIS_TOKEN": token,
        "COLUMNS": "200",
        **env,
    }
    return subprocess.run(
        [*IRIS, *args], input=stdin, capture_output=True, text=True, env=full_env, timeout=120
    )
