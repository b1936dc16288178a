"""Accepting a submit, as pure functions: the job's name, what it inherits from its parent, and
whether (and as what) it is inserted. The controller reads the rows these decide from inside the
submit's transaction (commands.py) and commits the ``InsertJob`` they return."""

from __future__ import annotations

from typing import Any

from iris.cluster.controller.effects import InsertJob
from iris.cluster.controller.scheduler.gates import Budget, admission_refusal
from iris.cluster.controller.scheduler.model import Resources
from iris.cluster.controller.snapshots import JobRow
from iris.cluster.types import JobName
from iris.rpc.enums import TERMINAL_JOB_STATES, PriorityBand
from iris.rpc.errors import AlreadyExists, FailedPrecondition, InvalidArgument, NotFound, PermissionDenied
from iris.rpc.models import JobSpec


def job_name_of(spec: JobSpec) -> JobName:
    """The job's path: a child of its parent, or a root job of its user."""
    try:
        if spec.parent_job_id:
            return JobName.parse(spec.parent_job_id).child(spec.name)
        return JobName.root(spec.user or "anonymous", spec.name)
    except ValueError as exc:
        raise InvalidArgument(str(exc)) from None


def inherit_from_parent(child: JobSpec, parent: JobSpec) -> JobSpec:
    """A sub-job runs in its parent's world: workspace bundle, environment variables and pip
    environment and image carry over unless the child names its own (its own env vars win key by key)."""
    update: dict[str, Any] = {}
    if child.bundle_id is None and parent.bundle_id is not None:
        update["bundle_id"] = parent.bundle_id
    if parent.env:
        update["env"] = {**parent.env, **child.env}
    if child.environment is None and parent.environment is not None:
        update["environment"] = parent.environment
    if child.image is None and parent.image is not None:
        update["image"] = parent.image
        update["image_pull_policy"] = parent.image_pull_policy
    if not child.secrets and parent.secrets:
        update["secrets"] = parent.secrets
    return child.model_copy(update=update) if update else child


def accept_submit(
    spec: JobSpec,
    job_name: JobName,
    now: float,
    *,
    parent: tuple[JobRow, JobSpec] | None,
    existing: JobRow | None,
    existing_stopping: bool,
    budget: Budget | None,
    admin: bool,
) -> InsertJob | None:
    """The job to insert, None to keep an existing one (policy ``keep``), or the reason it is
    refused (raised as the API error).

    ``parent``: the parent job's row and spec (None for a root job, or a parent that does not
    exist); ``existing``: the job already under this name; ``existing_stopping``: whether that
    job's tree still has attempts not confirmed gone; ``budget``: the user's (None: no budget);
    ``admin``: the caller may submit at PRODUCTION without a budget allowing it."""
    root_submitted_at = now
    if spec.parent_job_id:
        if parent is None:
            raise NotFound(f"parent job {spec.parent_job_id} does not exist")
        parent_row, parent_spec = parent
        if parent_row.state in TERMINAL_JOB_STATES:
            raise FailedPrecondition(f"parent job {spec.parent_job_id} has terminated ({parent_row.state})")
        root_submitted_at = parent_row.root_submitted_at
        spec = inherit_from_parent(spec, parent_spec)
        # a sub-job of a PRODUCTION job was admitted at PRODUCTION with its parent
        admin = admin or parent_row.priority is PriorityBand.PRODUCTION
    count = spec.replicas if spec.coscheduling else 1
    refusal = admission_refusal(
        job_name.user, spec.priority, Resources.from_spec(spec.resources), count, budget, admin=admin
    )
    if refusal is not None:
        raise PermissionDenied(refusal)
    job_id = str(job_name)
    replaces = None
    if existing is not None:
        if spec.existing_job_policy == "keep":
            return None
        state = existing.state.value.lower()
        if existing.state not in TERMINAL_JOB_STATES:
            raise AlreadyExists(f"job {job_id} is still {state}: stop it first, or choose another name")
        if spec.existing_job_policy != "replace":
            raise AlreadyExists(
                f"job {job_id} already exists ({state}); submit with --replace (replace=True) to replace it"
            )
        if existing_stopping:
            raise AlreadyExists(f"job {job_id} is still stopping its tasks: try again in a moment")
        replaces = job_id
    return InsertJob(
        job_id=job_id,
        spec=spec,
        user=job_name.user,
        parent_job_id=spec.parent_job_id,
        root_job_id="/" + job_name.namespace,
        depth=job_name.depth,
        root_submitted_at=root_submitted_at,
        replaces=replaces,
    )
