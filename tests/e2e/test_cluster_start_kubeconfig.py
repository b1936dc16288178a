"""`iris cluster start --local --backend kubernetes --kubeconfig FILE`: the controller runs against
the cluster the kubeconfig names (here a sandbox started apart, standing in for any cluster)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

from click.testing import CliRunner
from tests.conftest import wait_until

from iris.cli.main import cli
from iris.client import Entrypoint, IrisClient, JobState, ResourceSpec
from iris.rpc.errors import IrisError
from iris.testing.fake_apiserver import PODS
from iris.testing.k8s_sandbox import LOCAL_QUEUE_NAME, start_sandbox


def test_local_cluster_runs_its_pods_in_the_given_cluster(tmp_path: Path) -> None:
    with start_sandbox(tmp_path / "cluster", nodes=1, namespace="team") as sandbox:
        log = (tmp_path / "start.log").open("wb")
        argv = [sys.executable, "-m", "iris.cli.main", "cluster", "start", "--local", "--backend", "kubernetes",
                "--kubeconfig", str(sandbox.kubeconfig_path), "--namespace", "team", "--queue", LOCAL_QUEUE_NAME,
                "--port", "0", "--state-dir", str(tmp_path / "state")]  # fmt: skip
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            out = tmp_path / "start.log"
            match = wait_until(
                lambda: re.search(r"controller: (http://\S+)", out.read_text()), timeout=60, what="the URL"
            )
            assert f"kubeconfig: {sandbox.kubeconfig_path}" in out.read_text()
            assert not (tmp_path / "state" / "k8s").exists(), "no sandbox of its own was started"
            client = IrisClient(match.group(1))

            def done() -> bool:
                try:
                    return client.job(job.job_id).status() is JobState.SUCCEEDED
                except IrisError:
                    return False

            job = client.submit(
                Entrypoint.from_command("echo", "hi"),
                name="hi",
                resources=ResourceSpec(cpu=0.5, memory="64MB"),
            )
            wait_until(done, timeout=60, what="the job done")
            pods = sandbox.server.store.list(PODS, "team").items
            assert [p["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] for p in pods] == [LOCAL_QUEUE_NAME]
            client.close()
        finally:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=30)
            log.close()


def test_kubeconfig_needs_the_kubernetes_backend(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text("apiVersion: v1\n")
    result = CliRunner().invoke(cli, ["cluster", "start", "--local", "--kubeconfig", str(kubeconfig)])
    assert result.exit_code == 2
    assert "--kubeconfig goes with --backend kubernetes" in result.output
