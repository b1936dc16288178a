"""The controller's commands on jobs: submit, stop, endpoints, attempt lookups, budgets.

Each reads what it decides from inside its own transaction, decides with a pure function
(submission.py, round_kernel.py) and commits through the controller's guarded commit, so a command
and a round never overwrite each other's newer state.
"""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Sequence
from typing import TYPE_CHECKING

from iris.cluster.controller import round_kernel as kernel
from iris.cluster.controller import store
from iris.cluster.controller.backend import AttemptRef, BackendKind, TaskTarget
from iris.cluster.controller.capacity import workers_misfit
from iris.cluster.controller.effects import Change, Effects, Event, EventKind
from iris.cluster.controller.submission import accept_submit, job_name_of
from iris.cluster.types import JobName
from iris.rpc.enums import TERMINAL_JOB_STATES, JobState, StopReason
from iris.rpc.errors import FailedPrecondition, InvalidArgument, NotFound
from iris.rpc.models import (
    EndpointInfo,
    EndpointRegistration,
    JobSpec,
    ResourceSpec,
    UserBudget,
    UserBudgetInfo,
)

if TYPE_CHECKING:
    from iris.cluster.controller.controller import Controller

log = logging.getLogger("iris.controller")

WorkerShape = tuple[str, ResourceSpec, dict[str, str]]


class Commands:
    def __init__(self, controller: Controller) -> None:
        self.c = controller
        self._shapes: list[WorkerShape] | None = None

    # ------------------------------------------------------------ submit

    def submit_many(self, specs: Sequence[JobSpec], *, admin: bool = True) -> list[str]:
        """Submit jobs in order, each checked as a single submit is (each as its ``spec.user``),
        in one transaction: all of them or, on the first one rejected, none (with its error).
        ``admin``: the caller may submit at PRODUCTION priority without a budget allowing it."""
        c = self.c
        now = c.clock()
        names = [job_name_of(spec) for spec in specs]
        workers = self._worker_shapes() if any(self._checks_fit(spec) for spec in specs) else []
        for spec in specs:
            if spec.coscheduling and spec.replicas < 1:
                raise InvalidArgument("a coscheduled job needs at least one replica")
            if self._checks_fit(spec):
                self._check_fits_somewhere(spec, workers)
        for spec, job_name in zip(specs, names, strict=True):
            if spec.secrets:
                missing = c.secrets.missing(job_name.user, [ref.name for ref in spec.secrets])
                if missing:
                    raise InvalidArgument(
                        f"{job_name.user} has no secret named {', '.join(missing)} "
                        f"(set it with: iris secret set {missing[0]})"
                    )
        for bundle_id in {spec.bundle_id for spec in specs if spec.bundle_id is not None}:
            if not c.bundles.exists(bundle_id):
                raise FailedPrecondition(f"bundle {bundle_id} was never uploaded to this controller")
        with c.db.transaction() as cur:
            batch = _InsertBatch(c, cur, now)
            for spec, job_name in zip(specs, names, strict=True):
                self._insert_job(batch, spec, job_name, admin=admin)
            batch.commit()
        for spec, job_name in zip(specs, names, strict=True):
            log.info("job %s submitted: %d task(s)", job_name, spec.replicas, extra={"job_id": str(job_name)})
        c.wake()
        return [str(job_name) for job_name in names]

    def _insert_job(
        self, batch: _InsertBatch, spec: JobSpec, job_name: JobName, *, admin: bool = True
    ) -> None:
        """Add one job to the batch, or raise why it cannot be (submission.accept_submit). A job an
        earlier one of the same batch inserted counts as existing (``batch.commit_before_reading``)."""
        c = self.c
        job_id = str(job_name)
        cur = batch.cur
        batch.commit_before_reading(job_id, spec.parent_job_id)
        parent = None
        if spec.parent_job_id:
            parent_row = store.get_job(cur, spec.parent_job_id)
            if parent_row is not None:
                # not cached here: the parent may be an earlier job of this batch, gone if it rolls back
                parent_spec = c.specs.specs.get(spec.parent_job_id) or JobSpec.model_validate_json(
                    parent_row.spec_json
                )
                parent = (parent_row, parent_spec)
        existing = store.get_job(cur, job_id)
        if existing is not None:
            batch.commit()  # the tree read below must see every insert so far
        stopping = existing is not None and bool(
            store.jobs_with_live_attempts(cur, store.job_tree(cur, job_id))
        )
        insert = accept_submit(
            spec,
            job_name,
            batch.now,
            parent=parent,
            existing=existing,
            existing_stopping=stopping,
            budget=c.budgets.for_user(job_name.user),
            admin=admin,
        )
        if insert is None:
            return
        if insert.replaces is not None:
            c.db.after_commit(lambda: c.specs.forget(job_id))
        event = Event(EventKind.JOB_SUBMITTED, f"submitted {insert.spec.replicas} task(s)", job_id)
        batch.add(job_id, Change((insert,), (event,)))

    def _checks_fit(self, spec: JobSpec) -> bool:
        return self.c.backend_descriptor.kind is BackendKind.WORKER and not spec.wait_for_capacity

    def forget_shapes(self) -> None:
        """A worker registered, left or was cordoned: read the shapes again at the next submit."""
        self._shapes = None

    def _worker_shapes(self) -> list[WorkerShape]:
        """Every registered worker's capacity and attributes (what a submit is checked against),
        read once and kept until a worker registers or is reaped."""
        shapes = self._shapes
        if shapes is None:
            with self.c.db.read() as cur:
                shapes = [(w.worker_id, w.capacity, w.attributes) for w in store.list_workers(cur)]
            self._shapes = shapes
        return shapes

    def _check_fits_somewhere(self, spec: JobSpec, workers: list[WorkerShape]) -> None:
        """Reject at submit a job that no registered worker and no scale group could ever host
        (unless it asks to wait for capacity); see capacity.py."""
        gang = spec.replicas if spec.coscheduling else 1
        group_by = spec.coscheduling.group_by if spec.coscheduling else None
        worker_reason = workers_misfit(
            workers, spec.resources, spec.constraints, replicas=gang, group_by=group_by
        )
        autoscaler = self.c.autoscaler
        if autoscaler is None:
            if worker_reason:
                raise InvalidArgument(
                    f"no worker can ever run this job: {worker_reason}"
                    " (submit with --wait-for-capacity to queue it for workers yet to join)"
                )
            return
        group_reason = autoscaler.unfittable_reason(spec.resources, spec.constraints, gang, group_by)
        if group_reason and (not workers or worker_reason):
            also = f"; and {worker_reason}" if worker_reason else ""
            raise InvalidArgument(
                f"no scale group can ever run this job: {group_reason}{also}"
                " (submit with --wait-for-capacity to queue it anyway)"
            )

    # ------------------------------------------------------------ stop, endpoints, attempts

    def stop_job(self, job_id: str) -> JobState:
        c = self.c
        now = c.clock()
        with c.db.transaction() as cur:
            job = store.get_job(cur, job_id)
            if job is None:
                raise NotFound(f"job {job_id} does not exist")
            if job.state in TERMINAL_JOB_STATES:
                return job.state
            (snap,) = store.job_snapshots(cur, [job_id])
            change = kernel.terminate_job(
                snap, JobState.KILLED, "stopped by request", StopReason.CANCELLED, now
            )
            c.commit(cur, Effects(changes=(change,), urgent=True), now)
        c.wake()
        return JobState.KILLED

    def register_endpoint(self, reg: EndpointRegistration) -> EndpointInfo:
        """A live job's task publishes ``name`` in its job tree's namespace (replacing an older one)."""
        c = self.c
        now = c.clock()
        try:
            namespace = JobName.parse(reg.job_id).namespace
        except ValueError as exc:
            raise InvalidArgument(str(exc)) from None
        with c.db.transaction() as cur:
            job = store.get_job(cur, reg.job_id)
            if job is None:
                raise NotFound(f"job {reg.job_id} does not exist")
            if job.state in TERMINAL_JOB_STATES:
                raise FailedPrecondition(f"job {reg.job_id} has finished; its endpoints are gone")
            store.upsert_endpoint(
                cur,
                namespace=namespace,
                name=reg.name,
                address=reg.address,
                job_id=reg.job_id,
                task_id=reg.task_id,
                metadata=reg.metadata,
                now=now,
            )
        return EndpointInfo(
            name=reg.name,
            namespace=namespace,
            address=reg.address,
            job_id=reg.job_id,
            task_id=reg.task_id,
            metadata=reg.metadata,
            registered_at=now,
        )

    def attempt_ref(self, task_id: str, attempt_uid: str | None = None) -> AttemptRef:
        """The task's current (or given) attempt and where its RPCs go; raises NotFound."""
        with self.c.db.read() as cur:
            task = store.get_task(cur, task_id)
            if task is None:
                raise NotFound(f"task {task_id} does not exist")
            uid = attempt_uid or task.current_attempt_uid
            if uid is None:
                raise FailedPrecondition(f"task {task_id} has not started yet")
            attempt = store.get_attempt(cur, uid)
        if attempt is None or attempt.task_id != task_id:
            raise NotFound(f"attempt {uid} of task {task_id} does not exist")
        if self.c.backend_descriptor.kind is BackendKind.KUBERNETES:
            return AttemptRef(TaskTarget(attempt_uid=uid), uid, task_id)
        if not attempt.worker_address:
            raise FailedPrecondition(f"the worker that ran task {task_id} is gone")
        return AttemptRef(TaskTarget(address=attempt.worker_address), uid, task_id)

    # ------------------------------------------------------------ budgets

    def set_budget(self, user: str, budget: UserBudget) -> UserBudgetInfo:
        info = self.c.budgets.set(user, budget, self.c.clock())
        self.c.invalidate_queue()
        return info

    def remove_budget(self, user: str) -> bool:
        removed = self.c.budgets.remove(user)
        self.c.invalidate_queue()
        return removed


class _InsertBatch:
    """A submit's inserts, committed together (one guarded commit for a whole ``submit_many``),
    and before any read that could see them: a job of the batch named again or as a parent, or
    the tree of a job that already exists."""

    def __init__(self, controller: Controller, cur: sqlite3.Cursor, now: float) -> None:
        self.c, self.cur, self.now = controller, cur, now
        self._changes: list[Change] = []
        self._ids: set[str] = set()

    def commit_before_reading(self, *job_ids: str | None) -> None:
        """Commit the inserts so far if a read of these jobs could see one of them."""
        if any(job_id in self._ids for job_id in job_ids if job_id is not None):
            self.commit()

    def add(self, job_id: str, change: Change) -> None:
        self._changes.append(change)
        self._ids.add(job_id)

    def commit(self) -> None:
        if self._changes:
            self.c.commit(self.cur, Effects(changes=tuple(self._changes)), self.now)
            self._changes, self._ids = [], set()
