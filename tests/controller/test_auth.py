"""Token authentication: static tokens by role, minted job tokens, and the ownership rule."""

from __future__ import annotations

import pytest

from iris.cluster.controller.auth import OPEN, Authenticator, JobRun, Principal, StaticToken
from iris.rpc.errors import PermissionDenied, Unauthenticated

TOKENS = [
    StaticToken("admin-secret", "admin"),
    StaticToken("alice-secret", "user", "alice"),
    StaticToken("worker-secret", "worker"),
]


def test_no_tokens_means_open() -> None:
    assert Authenticator().authenticate(None) is OPEN


@pytest.mark.parametrize(
    ("header", "expected"),
    [
        ("Bearer admin-secret", Principal("admin")),
        ("bearer alice-secret", Principal("user", "alice")),
        ("Bearer worker-secret", Principal("worker")),
    ],
)
def test_static_tokens(header: str, expected: Principal) -> None:
    assert Authenticator(TOKENS, secret=b"s").authenticate(header) == expected


@pytest.mark.parametrize("header", [None, "", "Basic abc", "Bearer nope", "Bearer iris-job.e30.0000"])
def test_bad_or_missing_tokens_are_rejected(header: str | None) -> None:
    with pytest.raises(Unauthenticated):
        Authenticator(TOKENS, secret=b"s").authenticate(header)


def test_job_tokens_act_as_the_jobs_user_and_need_the_secret() -> None:
    auth = Authenticator(TOKENS, secret=b"s")
    token = auth.job_token("/alice/train", "alice", "r1")
    assert auth.authenticate(f"Bearer {token}") == Principal("user", "alice", job_scope="/alice/train")
    with pytest.raises(Unauthenticated):
        Authenticator(TOKENS, secret=b"other").authenticate(f"Bearer {token}")
    forged = token.replace(token.split(".")[1], auth.job_token("/bob/x", "bob", "r1").split(".")[1])
    with pytest.raises(Unauthenticated):
        auth.authenticate(f"Bearer {forged}")


def test_roles() -> None:
    alice, admin, worker = Principal("user", "alice"), Principal("admin"), Principal("worker")
    assert alice.owns("alice") and not alice.owns("bob") and admin.owns("bob") and not worker.owns("bob")
    with pytest.raises(PermissionDenied):
        worker.may_use_jobs()
    with pytest.raises(PermissionDenied):
        alice.may_act_as_worker()
    worker.may_act_as_worker()


def test_job_tokens_reach_their_job_tree_only() -> None:
    auth = Authenticator(TOKENS, secret=b"s")
    principal = auth.authenticate(f"Bearer {auth.job_token('/alice/train', 'alice', 'r1')}")
    assert principal.owns("alice", "/alice/train") and principal.owns("alice", "/alice/train/eval")
    assert not principal.owns("alice", "/alice/other") and not principal.owns("alice", "/alice/trainer")
    assert not principal.owns("bob", "/bob/train") and not principal.owns("alice")


def test_job_tokens_expire_and_die_with_their_job() -> None:
    now = [1000.0]
    finished: set[str] = set()
    auth = Authenticator(
        TOKENS, secret=b"s", job_run=lambda job: JobRun("r1", job in finished), clock=lambda: now[0]
    )
    token = auth.job_token("/alice/train", "alice", "r1", ttl_s=60)
    assert auth.authenticate(f"Bearer {token}").job_scope == "/alice/train"
    finished.add("/alice/train")
    with pytest.raises(Unauthenticated, match="finished"):
        auth.authenticate(f"Bearer {token}")
    finished.clear()
    now[0] += 61
    with pytest.raises(Unauthenticated, match="expired"):
        auth.authenticate(f"Bearer {token}")


def test_a_job_token_names_its_run_and_a_replaced_runs_token_is_refused() -> None:
    runs = {"/alice/train": JobRun("r1", False)}
    auth = Authenticator(TOKENS, secret=b"s", job_run=runs.get)
    old = auth.job_token("/alice/train", "alice", "r1")
    assert auth.authenticate(f"Bearer {old}").job_scope == "/alice/train"
    runs["/alice/train"] = JobRun("r2", False)  # --replace: same job id, a new run
    with pytest.raises(Unauthenticated, match="earlier run"):
        auth.authenticate(f"Bearer {old}")
    assert auth.authenticate(f"Bearer {auth.job_token('/alice/train', 'alice', 'r2')}").user == "alice"
    del runs["/alice/train"]
    with pytest.raises(Unauthenticated, match="no longer exists"):
        auth.authenticate(f"Bearer {old}")
