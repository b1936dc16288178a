"""Jobs: dry run, submit (one or a batch), list, stop, callable, results, events, and a job with a page of its tasks.

Job ids are paths (``/alice/train/0``); they appear in URLs without the leading slash, and
custom methods follow a colon: ``POST /api/v1/jobs/alice/train:stop``."""

from __future__ import annotations

import asyncio
import base64
import dataclasses
from functools import partial

from fastapi import APIRouter, Query, Request
from fastapi.responses import Response
from starlette.concurrency import run_in_threadpool

from iris.cluster.controller import results, store, views
from iris.cluster.controller.api import common as access
from iris.cluster.controller.api.common import job_id_from_path, json_body, model_response, read_model, who
from iris.cluster.controller.api.logs import attach_failures
from iris.cluster.controller.controller import Controller
from iris.rpc.enums import TERMINAL_JOB_STATES, JobState
from iris.rpc.errors import NotFound
from iris.rpc.models import (
    DEFAULT_TASK_PAGE,
    MAX_TASK_PAGE,
    DryRunResult,
    JobDetail,
    JobList,
    JobSpec,
    StopResponse,
    SubmitManyRequest,
    SubmitManyResponse,
    SubmitResponse,
    TaskResults,
)

MAX_JOB_WAIT_S = 60.0  # the longest a job wait holds its request open


def add_routes(router: APIRouter, controller: Controller) -> None:
    owned_job = partial(access.owned_job, controller)
    as_caller = partial(access.as_caller, controller)

    @router.post("/api/v1/dry-run", response_model=DryRunResult)
    def dry_run(spec: JobSpec) -> DryRunResult:
        """Would this job place now, and where (or why not)? Nothing is submitted."""
        spec = as_caller(spec)
        return DryRunResult(**controller.dry_run(spec, user=spec.user))

    @router.post("/api/v1/jobs", response_model=SubmitResponse, openapi_extra=json_body(JobSpec))
    async def submit(request: Request) -> Response:
        spec = await read_model(request, JobSpec)
        return await run_in_threadpool(submit_one, spec)

    def submit_one(spec: JobSpec) -> Response:
        spec = as_caller(spec)
        if spec.parent_job_id:
            owned_job(spec.parent_job_id)
        job_id = controller.submit(spec, user=spec.user, admin=who().is_admin)
        return model_response(SubmitResponse(job_id=job_id))

    @router.post(
        "/api/v1/jobs:batch", response_model=SubmitManyResponse, openapi_extra=json_body(SubmitManyRequest)
    )
    async def submit_many(request: Request) -> Response:
        """Submit several jobs in one call, in order, each checked as a single submit is: all of
        them in one transaction, or none if one is rejected (the error names it)."""
        batch = await read_model(request, SubmitManyRequest)
        return await run_in_threadpool(submit_batch, batch)

    def submit_batch(batch: SubmitManyRequest) -> Response:
        specs = [as_caller(spec) for spec in batch.jobs]
        for parent in {spec.parent_job_id for spec in specs if spec.parent_job_id}:
            owned_job(parent)
        job_ids = controller.submit_many(specs, admin=who().is_admin)
        return model_response(SubmitManyResponse(job_ids=job_ids))

    @router.get("/api/v1/jobs", response_model=JobList)
    def list_jobs(
        state: list[str] = Query(default=[]),
        user: str | None = None,
        name: str | None = None,
        parent: str | None = None,
        roots: bool = False,
        limit: int = Query(default=100, ge=1, le=1000),
        offset: int = Query(default=0, ge=0),
        sort: str = "submitted_at",
        desc: bool = True,
        since: float | None = Query(default=None, allow_inf_nan=False),
    ) -> Response:
        states = [s.upper() for s in state for s in s.split(",") if s]
        principal = who()
        principal.may_use_jobs()
        if not principal.is_admin:
            user = principal.user  # users list their own jobs only
        with controller.db.read() as cur:
            rows, total = store.list_jobs(
                cur,
                states=states,
                user=user,
                name_contains=name,
                parent=job_id_from_path(parent) if parent else None,
                roots_only=roots,
                limit=limit,
                offset=offset,
                sort=sort,
                descending=desc,
                submitted_since=since,
            )
            if principal.job_scope is not None:  # a job token lists its own job tree only
                rows = [r for r in rows if principal.in_scope(r.job_id)]
                total = offset + len(rows)
            counts = store.task_counts_for_jobs(cur, [r.job_id for r in rows])
            waiting = [r.job_id for r in rows if r.state.value in ("PENDING", "RUNNING")]
            reasons = store.pending_reasons_for_jobs(cur, waiting)
        jobs = [views.job_status(r, counts[r.job_id], reasons.get(r.job_id)) for r in rows]
        return model_response(JobList(jobs=jobs, total=total, offset=offset))

    @router.post("/api/v1/jobs/{job_path:path}:stop", response_model=StopResponse)
    def stop_job(job_path: str) -> Response:
        job_id = owned_job(job_id_from_path(job_path))
        return model_response(StopResponse(job_id=job_id, state=controller.stop_job(job_id)))

    @router.get("/api/v1/jobs/{job_path:path}:callable")
    def job_callable(job_path: str) -> Response:
        """The pickled callable of a callable job, for runtimes that cannot carry it inline
        (a Kubernetes pod fetches a large one here instead of holding it in its own object)."""
        job_id = owned_job(job_id_from_path(job_path))
        with controller.db.read() as cur:
            row = store.get_job(cur, job_id)
        if row is None:
            raise NotFound(f"job {job_id} does not exist")
        entrypoint = row.spec.entrypoint
        if entrypoint.kind != "callable" or not entrypoint.callable_b64:
            raise NotFound(f"job {job_id} runs a command, not a Python callable")
        payload = base64.b64decode(entrypoint.callable_b64)
        return Response(content=payload, media_type="application/octet-stream")

    @router.get("/api/v1/jobs/{job_path:path}:results", response_model=TaskResults)
    def job_results(job_path: str) -> Response:
        """What the job's callable tasks returned or raised (their current attempts'), by task index."""
        job_id = owned_job(job_id_from_path(job_path))
        with controller.db.read() as cur:
            if store.get_job(cur, job_id) is None:
                raise NotFound(f"job {job_id} does not exist")
            return model_response(TaskResults(results=results.for_job(cur, job_id)))

    @router.get("/api/v1/jobs/{job_path:path}:events")
    def job_events(job_path: str, limit: int = Query(default=200, ge=1, le=2000)) -> dict[str, object]:
        job_id = owned_job(job_id_from_path(job_path))
        with controller.db.read() as cur:
            if store.get_job(cur, job_id) is None:
                raise NotFound(f"job {job_id} does not exist")
            rows = store.job_events(cur, job_id, limit)
        return {"events": [dataclasses.asdict(r) for r in rows]}

    @router.get("/api/v1/jobs/{job_path:path}", response_model=JobDetail)
    async def get_job(
        job_path: str,
        task_offset: int = Query(default=0, ge=0),
        task_limit: int = Query(default=DEFAULT_TASK_PAGE, ge=0, le=MAX_TASK_PAGE),
        wait_s: float = Query(default=0.0, ge=0, le=MAX_JOB_WAIT_S),
    ) -> Response:
        """The job and a page of its tasks (``task_counts`` counts all of them).

        With ``wait_s``, the answer waits until the job has ended, or ``wait_s`` has passed: a
        client waiting for a job holds one request instead of polling. No thread is held while
        it waits (the commit that ends the job wakes it)."""
        job_id = job_id_from_path(job_path)
        if wait_s <= 0:
            return (await run_in_threadpool(job_page, job_id, task_offset, task_limit))[0]
        ended = controller.job_waiters.add(job_id)  # before reading the state: no end is missed
        try:
            page, state = await run_in_threadpool(job_page, job_id, task_offset, task_limit)
            if state not in TERMINAL_JOB_STATES:
                try:
                    await asyncio.wait_for(ended, wait_s)
                except TimeoutError:
                    pass
                page, state = await run_in_threadpool(job_page, job_id, task_offset, task_limit)
        finally:
            controller.job_waiters.discard(job_id, ended)
        return page

    def job_page(job_id: str, task_offset: int, task_limit: int) -> tuple[Response, JobState]:
        owned_job(job_id)
        with controller.db.read() as cur:
            row = store.get_job(cur, job_id)
            if row is None:
                raise NotFound(f"job {job_id} does not exist")
            detail = views.job_detail(cur, row, task_offset=task_offset, task_limit=task_limit)
        return model_response(attach_failures(controller, detail)), detail.state
