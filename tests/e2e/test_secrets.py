"""Per-user secrets, defaults.task_env and forward_env on a real local cluster with auth."""

from __future__ import annotations

import stat
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from tests.e2e.secure_cluster import iris, secure_cluster

from iris.client import Entrypoint, IrisClient, JobState, LocalCluster, ResourceSpec
from iris.rpc.errors import InvalidArgument, PermissionDenied

CONFIG = """
defaults:
  task_env: {TEAM: ml, SHADOWED: from-config}
forward_env: [IRIS_TEST_FORWARDED]
"""
SMALL = ResourceSpec(cpu=0.5, memory="64MB")
VALUE = "hf_s3cr3t-Value-42"
# Prints the value (masked in the log) and its reverse (not masked: proves the task had it).
PRINTER = (
    'echo "token=$HF_TOKEN"; echo "reversed=$(printf %s "$HF_TOKEN" | rev)"; '
    'echo "team=$TEAM shadowed=$SHADOWED forwarded=$IRIS_TEST_FORWARDED"'
)


@pytest.fixture(scope="module")
def secure(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    root: Path = tmp_path_factory.mktemp("secrets")
    with secure_cluster(root, "secrets", CONFIG) as cluster:
        cluster.state_root = root / "controller"  # type: ignore[attr-defined]
        yield cluster


def test_alice_secret_is_injected_masked_and_never_returned(secure: LocalCluster, tmp_path: Path) -> None:
    done = iris(secure, "alice-token-123", "secret", "set", "HF", stdin=VALUE + "\n")
    assert done.returncode == 0, done.stderr
    listed = iris(secure, "alice-token-123", "secret", "list", "-o", "json")
    assert listed.returncode == 0 and '"HF"' in listed.stdout and VALUE not in listed.stdout

    run = iris(
        secure,
        "alice-token-123",
        "job", "run", "--no-workspace", "--cpu", "0.5", "--memory", "64", "--name", "uses-secret",
        "--secret", "HF=HF_TOKEN", "--env", "SHADOWED=from-job",
        "--", "sh", "-c", PRINTER,
        IRIS_TEST_FORWARDED="from-submitter",
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    # The task saw the value (it compared it), but its printed copy is masked in the log.
    assert "token=***" in run.stdout and f"reversed={VALUE[::-1]}" in run.stdout
    assert VALUE not in run.stdout
    assert "team=ml shadowed=from-job forwarded=from-submitter" in run.stdout

    alice = IrisClient(secure.url, token="alice-token-123")
    job = alice.job("/alice/uses-secret")
    assert job.wait(timeout=60).state is JobState.SUCCEEDED
    headers = {"authorization": "Bearer admin-token-123"}
    answers = [
        httpx.get(f"{secure.url}/api/v1/jobs/alice/uses-secret", headers=headers).text,
        httpx.get(f"{secure.url}/api/v1/jobs/alice/uses-secret:logs", headers=headers).text,
        httpx.get(f"{secure.url}/api/v1/jobs/alice/uses-secret:events", headers=headers).text,
        httpx.get(f"{secure.url}/api/v1/secrets", headers=headers).text,
        httpx.get(f"{secure.url}/api/v1/jobs", headers=headers).text,
        iris(secure, "alice-token-123", "job", "status", "/alice/uses-secret", "-o", "yaml").stdout,
        iris(secure, "alice-token-123", "job", "logs", "/alice/uses-secret").stdout,
    ]
    assert "HF" in answers[0]  # the spec names the secret ...
    for answer in answers:
        assert VALUE not in answer  # ... but no answer holds its value
    assert "token=***" in answers[1]
    # At rest: encrypted in the database, the key in a 0600 file beside it.
    state: Path = secure.state_root  # type: ignore[attr-defined]
    key = state / "secrets.key"
    assert stat.S_IMODE(key.stat().st_mode) == 0o600
    for db_file in state.glob("controller.sqlite3*"):
        assert VALUE.encode() not in db_file.read_bytes()


def test_bob_cannot_use_or_see_alice_secret(secure: LocalCluster) -> None:
    alice = IrisClient(secure.url, token="alice-token-123")
    alice.set_secret("ONLY_ALICE", "alice-private-value")
    bob = IrisClient(secure.url, token="bob-token-12345")
    with pytest.raises(InvalidArgument, match="bob has no secret named ONLY_ALICE"):
        bob.submit(Entrypoint.from_command("true"), name="steal", resources=SMALL, secrets=["ONLY_ALICE"])
    refused = iris(
        secure, "bob-token-12345", "job", "run", "--no-workspace", "--secret", "ONLY_ALICE", "--", "true"
    )
    assert refused.returncode != 0 and "no secret named ONLY_ALICE" in refused.stderr
    assert "Traceback" not in refused.stderr
    assert [s.name for s in bob.list_secrets().secrets] == []
    with pytest.raises(PermissionDenied):
        bob.list_secrets(user="alice")
    with pytest.raises(PermissionDenied):
        bob.remove_secret("ONLY_ALICE", user="alice")
    with pytest.raises(PermissionDenied):
        bob.set_secret("ONLY_ALICE", "overwritten", user="alice")
    assert "ONLY_ALICE" in {s.name for s in alice.list_secrets().secrets}
    admin = IrisClient(secure.url, token="admin-token-123")
    assert ("alice", "ONLY_ALICE") in {(s.user, s.name) for s in admin.list_secrets().secrets}
    alice.remove_secret("ONLY_ALICE")
    assert "ONLY_ALICE" not in {s.name for s in alice.list_secrets().secrets}
