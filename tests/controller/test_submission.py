"""Accepting a submit (submission.accept_submit): a pure function over the rows a submit reads."""

from __future__ import annotations

import pytest

from iris.cluster.controller.scheduler.gates import Budget
from iris.cluster.controller.snapshots import JobRow
from iris.cluster.controller.submission import accept_submit, job_name_of
from iris.rpc.enums import JobState, PriorityBand
from iris.rpc.errors import AlreadyExists, FailedPrecondition, InvalidArgument, NotFound, PermissionDenied
from iris.rpc.models import Entrypoint, JobSpec

CMD = Entrypoint.from_command("true")


def _spec(name: str = "job", **kw: object) -> JobSpec:
    return JobSpec(name=name, entrypoint=CMD, user="alice", **kw)  # type: ignore[arg-type]


def _row(job_id: str, state: JobState, *, priority: PriorityBand = PriorityBand.INTERACTIVE) -> JobRow:
    return JobRow(
        job_id=job_id,
        name=job_id.rsplit("/", 1)[-1],
        user="alice",
        parent_job_id=None,
        root_job_id=job_id,
        depth=1,
        state=state,
        priority=priority,
        replicas=1,
        spec_json="{}",
        submitted_at=5.0,
        root_submitted_at=5.0,
        started_at=None,
        finished_at=None,
        scheduling_deadline=None,
        error=None,
        exit_code=None,
        pending_reason=None,
    )


def _accept(spec: JobSpec, **kw: object):  # type: ignore[no-untyped-def]
    args: dict[str, object] = {
        "parent": None,
        "existing": None,
        "existing_stopping": False,
        "budget": None,
        "admin": True,
    }
    args.update(kw)
    return accept_submit(spec, job_name_of(spec), 100.0, **args)  # type: ignore[arg-type]


def test_a_new_root_job_is_inserted_under_its_user() -> None:
    insert = _accept(_spec())
    assert insert is not None
    assert (insert.job_id, insert.user, insert.root_job_id, insert.depth) == (
        "/alice/job",
        "alice",
        "/alice/job",
        1,
    )
    assert insert.root_submitted_at == 100.0 and insert.replaces is None


def test_a_child_inherits_and_keeps_its_roots_submit_time() -> None:
    parent = _row("/alice/p", JobState.RUNNING)
    parent_spec = _spec("p", env={"A": "parent", "B": "parent"}, bundle_id="b" * 64)
    child = _spec("c", parent_job_id="/alice/p", env={"B": "child"})
    insert = _accept(child, parent=(parent, parent_spec))
    assert insert is not None
    assert insert.job_id == "/alice/p/c" and insert.root_submitted_at == 5.0
    assert insert.spec.env == {"A": "parent", "B": "child"} and insert.spec.bundle_id == "b" * 64


@pytest.mark.parametrize(
    ("case", "kw", "error", "message"),
    [
        (
            "no parent",
            {"spec": _spec("c", parent_job_id="/alice/p")},
            NotFound,
            "parent job /alice/p does not exist",
        ),
        (
            "ended parent",
            {
                "spec": _spec("c", parent_job_id="/alice/p"),
                "parent": (_row("/alice/p", JobState.FAILED), _spec("p")),
            },
            FailedPrecondition,
            "has terminated",
        ),
        ("running name", {"existing": _row("/alice/job", JobState.RUNNING)}, AlreadyExists, "still running"),
        ("ended name", {"existing": _row("/alice/job", JobState.SUCCEEDED)}, AlreadyExists, "--replace"),
        (
            "replace while stopping",
            {
                "spec": _spec(existing_job_policy="replace"),
                "existing": _row("/alice/job", JobState.KILLED),
                "existing_stopping": True,
            },
            AlreadyExists,
            "still stopping its tasks",
        ),
        (
            "production without admin",
            {"spec": _spec(priority=PriorityBand.PRODUCTION), "admin": False},
            PermissionDenied,
            "PRODUCTION priority is for admins",
        ),
        (
            "above the budget's band",
            {"spec": _spec(priority=PriorityBand.INTERACTIVE), "budget": Budget(max_band=PriorityBand.BATCH)},
            PermissionDenied,
            "may submit at BATCH priority or lower",
        ),
    ],
)
def test_refusals(case: str, kw: dict[str, object], error: type[Exception], message: str) -> None:
    spec = kw.pop("spec", _spec())
    with pytest.raises(error, match=message):
        _accept(spec, **kw)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("policy", "state", "want"),
    [
        ("keep", JobState.RUNNING, None),  # the running job stays, nothing inserted
        ("keep", JobState.SUCCEEDED, None),
        ("replace", JobState.FAILED, "/alice/job"),  # replaces the ended run
    ],
)
def test_existing_job_policies(policy: str, state: JobState, want: str | None) -> None:
    insert = _accept(_spec(existing_job_policy=policy), existing=_row("/alice/job", state))
    assert (insert.replaces if insert is not None else None) == want


def test_a_child_of_a_production_job_is_admitted_with_it() -> None:
    parent = (_row("/alice/p", JobState.RUNNING, priority=PriorityBand.PRODUCTION), _spec("p"))
    child = _spec("c", parent_job_id="/alice/p", priority=PriorityBand.PRODUCTION)
    assert _accept(child, parent=parent, admin=False) is not None


def test_a_bad_name_is_one_sentence() -> None:
    with pytest.raises(InvalidArgument):
        job_name_of(_spec("c", parent_job_id="not a job path"))
