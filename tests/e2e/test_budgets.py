"""Per-user budgets through the API and `iris user budget`, on a real local cluster with auth:
admins change budgets, users cannot; work beyond a budget waits and `iris job status` says why;
bands above a user's budget are refused at submit."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from tests.e2e.secure_cluster import iris, secure_cluster

from iris.client import Entrypoint, IrisClient, JobState, LocalCluster, ResourceSpec
from iris.rpc.errors import NotFound, PermissionDenied
from iris.rpc.models import UserBudget

ONE = ResourceSpec(cpu=1, memory="64MB")


@pytest.fixture(scope="module")
def secure(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    budgets = "user_budgets:\n  bob: {cpu: 2, max_band: BATCH}\n"
    with secure_cluster(tmp_path_factory.mktemp("budgets"), "budgets", budgets) as cluster:
        yield cluster


def test_only_admins_change_budgets_and_everyone_reads_them(secure: LocalCluster) -> None:
    denied = iris(secure, "alice-token-123", "user", "budget", "set", "alice", "--cpu", "64")
    assert denied.returncode != 0 and "only an admin may change user budgets" in denied.stderr
    assert "Traceback" not in denied.stderr
    done = iris(secure, "admin-token-123", "user", "budget", "set", "alice", "--cpu", "1", "--memory", "1GB")
    assert done.returncode == 0, done.stderr
    assert "budget of alice set: cpu 1, memory 1GB" in done.stdout
    listed = iris(secure, "alice-token-123", "user", "budget", "list")
    assert listed.returncode == 0, listed.stderr
    rows = {line.split()[0]: line for line in listed.stdout.splitlines()[1:] if line.strip()}
    assert "api" in rows["alice"] and "config" in rows["bob"] and "BATCH" in rows["bob"]
    bad = iris(secure, "admin-token-123", "user", "budget", "set", "alice", "--memory", "lots")
    assert bad.returncode != 0 and "Traceback" not in bad.stderr
    missing = iris(secure, "admin-token-123", "user", "budget", "get", "carol")
    assert missing.returncode != 0 and "carol has no budget" in missing.stderr


def test_work_beyond_the_budget_waits_and_job_status_says_why(secure: LocalCluster) -> None:
    admin = IrisClient(secure.url, token="admin-token-123")
    admin.set_budget("alice", UserBudget(cpu=1))
    alice = IrisClient(secure.url, token="alice-token-123")
    first = alice.submit(Entrypoint.from_command("sleep", "120"), name="first", resources=ONE)
    second = alice.submit(Entrypoint.from_command("true"), name="second", resources=ONE)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            tasks = second.tasks()
            if first.status() is JobState.RUNNING and tasks and tasks[0].pending_reason:
                break
            time.sleep(0.1)
        assert second.tasks()[0].pending_reason == "user budget: alice uses 1 of 1 cpu"
        status = iris(secure, "alice-token-123", "job", "status", second.job_id)
        assert "user budget: alice uses 1 of 1 cpu" in status.stdout, status.stdout + status.stderr
        first.kill()
        assert second.wait(timeout=60).state is JobState.SUCCEEDED  # room in the budget again
    finally:
        first.kill()
        second.kill()


def test_bands_above_the_budget_are_refused_at_submit(secure: LocalCluster) -> None:
    bob = IrisClient(secure.url, token="bob-token-12345")
    with pytest.raises(PermissionDenied, match="bob may submit at BATCH priority or lower"):
        bob.submit(Entrypoint.from_command("true"), name="inter", resources=ONE)
    alice = IrisClient(secure.url, token="alice-token-123")
    with pytest.raises(PermissionDenied, match="PRODUCTION priority is for admins"):
        alice.submit(Entrypoint.from_command("true"), name="prod", resources=ONE, priority="PRODUCTION")
    refused = iris(secure, "bob-token-12345", "job", "run", "--no-workspace", "--cpu", "1", "--", "true")
    assert refused.returncode != 0 and "may submit at BATCH priority or lower" in refused.stderr
    assert "Traceback" not in refused.stderr
    admin = IrisClient(secure.url, token="admin-token-123")
    admin.set_budget("alice", UserBudget(cpu=4))
    admin.remove_budget("alice")
    with pytest.raises(NotFound):
        admin.get_budget("alice")
