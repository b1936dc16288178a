"""The controller's HTTP/JSON API (FastAPI). The dashboard and the CLI use exactly this surface.

Job and task ids are paths (``/alice/train/0``); they appear in URLs without the leading slash,
and custom methods follow a colon: ``POST /api/v1/jobs/alice/train:stop``.
"""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import logging
import re
from contextvars import ContextVar
from pathlib import Path
from typing import Any, Literal, TypeVar

from fastapi import FastAPI, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, JSONResponse, Response
from pydantic import BaseModel, ValidationError
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException as StarletteHTTPException

from iris import __version__
from iris.cluster.controller import results, store, views
from iris.cluster.controller.auth import Principal
from iris.cluster.controller.backend import dashboard_backend_descriptor
from iris.cluster.controller.bundles import check_bundle_id
from iris.cluster.controller.controller import Controller
from iris.cluster.controller.cross_site import CrossSiteGuard
from iris.cluster.controller.disk_full import note_disk_full
from iris.cluster.controller.http_guard import HttpGuard
from iris.cluster.controller.log_routes import add_log_routes, attach_failures
from iris.cluster.controller.metrics import CONTENT_TYPE, CountsReader, RequestTimer
from iris.cluster.runtime.profiling import (
    MAX_PROFILE_S,
    exec_timeout,
    failure_sentence,
    profile_argv,
    top_functions,
)
from iris.cluster.types import JobName
from iris.rpc.enums import TERMINAL_JOB_STATES, JobState
from iris.rpc.errors import (
    FailedPrecondition,
    InsufficientStorage,
    InvalidArgument,
    IrisError,
    NotFound,
    NotImplementedForBackend,
    PermissionDenied,
)
from iris.rpc.models import (
    DEFAULT_TASK_PAGE,
    MAX_TASK_PAGE,
    SECRET_NAME_PATTERN,
    ClientConfig,
    ClusterStatus,
    CordonRequest,
    DashboardInfo,
    DryRunResult,
    EndpointInfo,
    EndpointList,
    EndpointRegistration,
    ExecRequest,
    ExecResponse,
    JobDetail,
    JobList,
    JobSpec,
    LogsResponse,
    RegisterRequest,
    RegisterResponse,
    SecretList,
    SecretValue,
    StopResponse,
    SubmitManyRequest,
    SubmitManyResponse,
    SubmitResponse,
    TaskResult,
    TaskResults,
    UserBudget,
    UserBudgetInfo,
    UserBudgetList,
    WorkerInfo,
    WorkerList,
    WorkerStatus,
)

M = TypeVar("M", bound=BaseModel)
log = logging.getLogger("iris.service")
MAX_JOB_WAIT_S = 60.0  # the longest a job wait holds its request open


def model_response(model: BaseModel) -> Response:
    """A model already built and checked by our own code, serialized once: returned through
    ``response_model`` FastAPI would validate and serialize it again (a third of a 1,000-task
    page's time), and for a sync route do that on a second trip through the thread pool (most of
    a submit's wait on a busy controller). The route keeps ``response_model`` for its schema."""
    return Response(model.model_dump_json(), media_type="application/json")


def _job_id(path: str) -> str:
    path = path.strip("/")
    if not path:
        raise InvalidArgument("missing job id")
    return "/" + path


def json_body(model: type[BaseModel]) -> dict[str, Any]:
    """OpenAPI for a route that reads its JSON body itself (``read_model``): the model's schema."""
    ref = {"$ref": f"#/components/schemas/{model.__name__}"}
    return {"requestBody": {"required": True, "content": {"application/json": {"schema": ref}}}}


async def read_model(request: Request, model: type[M]) -> M:
    """The request's JSON body as ``model``, parsed straight from the bytes by pydantic-core (the
    hot submit routes: FastAPI's own body handling costs several times more); a bad body is a
    400 in the same words as FastAPI's validation errors."""
    try:
        return model.model_validate_json(await request.body())
    except ValidationError as exc:
        raise InvalidArgument(_validation_message(exc)) from None


def _validation_message(exc: RequestValidationError | ValidationError) -> str:
    parts = []
    for err in exc.errors()[:3]:
        loc = ".".join(str(x) for x in err.get("loc", ()) if x not in ("body", "query", "path"))
        msg = str(err.get("msg", "invalid"))
        msg = msg.removeprefix("Value error, ")
        parts.append(f"{loc}: {msg}" if loc else msg)
    return "invalid request: " + "; ".join(parts)


_principal: ContextVar[Principal] = ContextVar("iris_principal")


def create_app(controller: Controller, *, dashboard_dir: Path | None = None) -> FastAPI:
    app = FastAPI(title="Iris controller", version=__version__, description="Submit, watch and stop jobs.")
    app.add_middleware(RequestTimer, histogram=controller.metrics.api_request_seconds)
    controller.metrics.watch_state(CountsReader(controller))

    class _Authenticate:
        """Every /api/v1 request carries a principal; with no tokens configured, everyone is admin."""

        def __init__(self, inner: Any) -> None:
            self.inner = inner

        async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
            if scope["type"] == "http" and scope["path"].startswith("/api/"):
                header = dict(scope.get("headers") or []).get(b"authorization")
                try:
                    principal = controller.auth.authenticate(header.decode("latin-1") if header else None)
                except IrisError as exc:
                    body = {"error": {"code": exc.code, "message": exc.message}}
                    await JSONResponse(status_code=exc.status_code, content=body)(scope, receive, send)
                    return
                token = _principal.set(principal)
                try:
                    await self.inner(scope, receive, send)
                finally:
                    _principal.reset(token)
                return
            await self.inner(scope, receive, send)

    app.add_middleware(_Authenticate)
    # No tokens: only JSON writes and our own host names (a web page cannot drive the controller).
    app.add_middleware(
        CrossSiteGuard,
        enabled=lambda: not controller.auth.enabled,
        url=lambda: getattr(controller, "controller_url", "") or "",
    )
    app.add_middleware(HttpGuard)  # outermost: bounds every body before anything reads it

    def who() -> Principal:
        return _principal.get()

    def owned_job(job_id: str) -> str:
        """The job's id if the caller may see it; others' jobs look absent (no leak of their names)."""
        principal = who()
        principal.may_use_jobs()
        if principal.is_admin:
            return job_id
        with controller.db.read() as cur:
            job = store.get_job(cur, job_id)
        if job is None or not principal.owns(job.user, job_id):
            raise NotFound(f"job {job_id} does not exist")
        return job_id

    def owned_task(task_id: str) -> str:
        owned_job(task_id.rsplit("/", 1)[0])
        return task_id

    def live_task_logs(task_id: str, uid: str, *, offset: int, limit: int) -> LogsResponse:
        """A page read from the machine running the attempt (before its worker shipped anything)."""
        ref = controller.attempt_ref(task_id, uid)
        return controller.require_backend().attempt_logs(ref, offset=offset, limit=limit)

    @app.exception_handler(IrisError)
    async def _iris_error(_: Request, exc: IrisError) -> JSONResponse:
        if isinstance(exc, InsufficientStorage):  # one line per 30 s, not one per refused request
            note_disk_full(exc.message)
        return JSONResponse(
            status_code=exc.status_code, content={"error": {"code": exc.code, "message": exc.message}}
        )

    @app.exception_handler(RequestValidationError)
    async def _validation_error(_: Request, exc: RequestValidationError) -> JSONResponse:
        return JSONResponse(
            status_code=400,
            content={"error": {"code": "invalid_argument", "message": _validation_message(exc)}},
        )

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        """Routing and body-parsing errors (404, 405, undecodable bodies) in our error shape."""
        codes = {400: "invalid_argument", 404: "not_found", 405: "method_not_allowed", 413: "too_large"}
        message = {404: "no such API path", 405: "this API path does not take that method"}.get(
            exc.status_code, str(exc.detail)
        )
        return JSONResponse(
            status_code=exc.status_code,
            content={"error": {"code": codes.get(exc.status_code, "http_error"), "message": message}},
            headers=exc.headers,
        )

    @app.exception_handler(Exception)
    async def _unexpected(_: Request, exc: Exception) -> JSONResponse:
        log.exception("unexpected error")
        return JSONResponse(
            status_code=500,
            content={"error": {"code": "internal", "message": f"internal error: {type(exc).__name__}"}},
        )

    @app.get("/healthz")
    def healthz() -> JSONResponse:
        """Unhealthy (503) while the state disk is full; writes are retried here so it recovers."""
        if controller.db.disk_full_since is not None and not controller.db.probe_write():
            message = f"the controller's state disk is full ({controller.db.path.parent}): it cannot record anything"
            return JSONResponse(
                status_code=503, content={"ok": False, "version": __version__, "error": message}
            )
        return JSONResponse(content={"ok": True, "version": __version__})

    @app.get("/metrics", include_in_schema=False)
    def metrics() -> Response:
        """Prometheus text exposition (docs/operations.md lists every series)."""
        return Response(controller.metrics.exposition(), media_type=CONTENT_TYPE)

    @app.get("/api/v1/cluster", response_model=ClusterStatus)
    def cluster_status(request: Request) -> Response:
        d = controller.backend_descriptor
        dash = dashboard_backend_descriptor(controller)
        with controller.db.read() as cur:
            scope = None if who().is_admin else who().user  # users count their own work only
            jobs = store.job_counts(cur, scope)
            tasks = store.task_counts(cur, scope)
        workers: dict[str, int] = {}
        if "workers" in dash.capabilities:
            with controller.db.read() as cur:
                for w in store.list_workers(cur):
                    s = controller.health.status(w.worker_id).value
                    workers[s] = workers.get(s, 0) + 1
        status = ClusterStatus(
            backend_id=d.backend_id,
            kind=d.kind.value,
            display_name=d.display_name,
            capabilities=dash.capabilities,
            version=__version__,
            uptime_s=controller.clock() - controller.started_at,
            jobs_by_state=jobs,
            tasks_by_state=tasks,
            workers_by_status=workers,
            dashboard_url=str(request.base_url),
        )
        return model_response(status)

    @app.get("/api/v1/dashboard", response_model=DashboardInfo)
    def dashboard_info() -> DashboardInfo:
        dash = dashboard_backend_descriptor(controller)
        return DashboardInfo(name=dash.name, capabilities=dash.capabilities)

    @app.get("/api/v1/client-config", response_model=ClientConfig)
    def client_config() -> ClientConfig:
        """What clients apply at submission (``forward_env`` of the cluster config)."""
        return ClientConfig(forward_env=controller.forward_env)

    # ---- per-user secrets: values go in, never come out (see controller/secrets.py)

    def secret_owner(user: str | None, default_user: str | None = None) -> str:
        """Whose secrets the caller acts on: a user's own always; an admin's ``user`` (or the
        client's login name, ``default_user``, as jobs of an open controller are named)."""
        principal = who()
        principal.may_use_jobs()
        if principal.job_scope is not None:
            raise PermissionDenied("a job token cannot read or change secrets")
        if principal.role == "user":
            assert principal.user is not None
            if user not in (None, principal.user):
                raise PermissionDenied("a user manages their own secrets only")
            return principal.user
        user = user or default_user
        if not user:
            raise InvalidArgument("name the user whose secrets these are (user=...)")
        return user

    def secret_name(name: str) -> str:
        if not re.fullmatch(SECRET_NAME_PATTERN, name):
            raise InvalidArgument(
                f"{name!r} is not a secret name: letters, digits and _, not starting with a digit"
            )
        return name

    @app.put("/api/v1/secrets/{name}", status_code=204)
    def put_secret(name: str, body: SecretValue) -> Response:
        owner = secret_owner(body.user, body.default_user)
        controller.secrets.set(owner, secret_name(name), body.value, controller.clock())
        return Response(status_code=204)

    @app.get("/api/v1/secrets", response_model=SecretList)
    def list_secrets(user: str | None = None) -> SecretList:
        """Names and times of the caller's secrets (an admin: anyone's, or ``user``'s); never values."""
        if who().is_admin and not user:
            return SecretList(secrets=controller.secrets.list(None))
        return SecretList(secrets=controller.secrets.list(secret_owner(user)))

    @app.delete("/api/v1/secrets/{name}", status_code=204)
    def delete_secret(name: str, user: str | None = None, default_user: str | None = None) -> Response:
        owner = secret_owner(user, default_user)
        if not controller.secrets.remove(owner, secret_name(name)):
            raise NotFound(f"{owner} has no secret named {name}")
        return Response(status_code=204)

    # ---- per-user budgets (the scheduler's first gate): anyone reads, admins change

    @app.get("/api/v1/budgets", response_model=UserBudgetList)
    def list_budgets() -> UserBudgetList:
        who().may_use_jobs()
        return UserBudgetList(budgets=controller.budgets.list())

    @app.get("/api/v1/budgets/{user}", response_model=UserBudgetInfo)
    def get_budget(user: str) -> UserBudgetInfo:
        who().may_use_jobs()
        found = controller.budgets.get(user)
        if found is None:
            raise NotFound(f"{user} has no budget: their work is limited by the cluster's capacity only")
        return found

    def budget_admin() -> None:
        if not who().is_admin:
            raise PermissionDenied("only an admin may change user budgets")

    @app.put("/api/v1/budgets/{user}", response_model=UserBudgetInfo)
    def put_budget(user: str, budget: UserBudget) -> UserBudgetInfo:
        budget_admin()
        return controller.set_budget(user, budget)

    @app.delete("/api/v1/budgets/{user}", status_code=204)
    def delete_budget(user: str) -> Response:
        budget_admin()
        if not controller.remove_budget(user):
            raise NotFound(f"{user} has no budget set by iris user budget set")
        return Response(status_code=204)

    @app.get("/api/v1/stats")
    def stats() -> dict[str, object]:
        return {
            "version": __version__,
            "uptime_s": controller.clock() - controller.started_at,
            "db_bytes": controller.db.size_bytes(),
            "loop": dict(controller.round_stats),
        }

    @app.get("/api/v1/timeseries")
    def timeseries() -> dict[str, object]:
        """Samples of task counts every few seconds: pending, running and cumulative outcomes."""
        return {"interval_s": controller.timeseries.interval_s, "points": list(controller.timeseries.points)}

    @app.get("/api/v1/scheduler")
    def scheduler_queue(limit: int = Query(default=200, ge=1, le=5000)) -> dict[str, object]:
        """The pending queue by priority band, each task with its reason and queue position."""
        principal = who()  # a user sees their own queue only
        with controller.db.read() as cur:
            rows = store.waiting_tasks(cur, limit, user=None if principal.is_admin else principal.user)
        bands: dict[str, list[dict[str, object]]] = {"PRODUCTION": [], "INTERACTIVE": [], "BATCH": []}
        for r in rows:
            reason = controller.last_pending.get(r.task_id)
            bands.setdefault(r.priority.value, []).append(
                {
                    "task_id": r.task_id,
                    "job_id": r.job_id,
                    "user": r.user,
                    "submitted_at": r.submitted_at,
                    "reason": r.pending_reason,
                    "code": str(reason.code) if reason is not None else None,
                    "position": reason.position if reason is not None else None,
                }
            )
        for entries in bands.values():
            entries.sort(key=lambda e: (e["position"] is None, e["position"] or 0, e["submitted_at"]))
        return {"bands": bands}

    @app.get("/api/v1/autoscaler")
    def autoscaler_status() -> dict[str, object]:
        if not controller.autoscaler_configured:
            raise NotImplementedForBackend("no autoscaler is configured on this controller")
        return controller.autoscaler.status_view()

    @app.get("/api/v1/cluster/overview")
    def cluster_overview() -> dict[str, object]:
        """KUBERNETES: pods by phase, Kueue admission, nodes. WORKER controllers use /api/v1/workers."""
        return controller.require_backend().overview()

    @app.post("/api/v1/dry-run", response_model=DryRunResult)
    def dry_run(spec: JobSpec) -> DryRunResult:
        """Would this job place now, and where (or why not)? Nothing is submitted."""
        spec = as_caller(spec)
        return DryRunResult(**controller.dry_run(spec, user=spec.user))

    @app.post("/api/v1/endpoints", response_model=EndpointInfo)
    def register_endpoint(reg: EndpointRegistration) -> EndpointInfo:
        owned_job(reg.job_id)
        return controller.register_endpoint(reg)

    @app.get("/api/v1/endpoints", response_model=EndpointList)
    def list_endpoints(job: str | None = None, name: str | None = None) -> EndpointList:
        """Endpoints, optionally only those visible to ``job`` (its root job's namespace)."""
        namespace = None
        if job:
            try:
                namespace = JobName.parse(_job_id(job)).namespace
            except ValueError as exc:
                raise InvalidArgument(str(exc)) from None
        principal = who()
        if not principal.is_admin:
            principal.may_use_jobs()
            mine = f"{principal.user}/"
            if namespace is not None and not namespace.startswith(mine):
                return EndpointList(endpoints=[])
            # A user sees the endpoints of their own job trees only (filtered below).
        with controller.db.read() as cur:
            rows = store.list_endpoints(cur, namespace=namespace, name=name)
        if not principal.is_admin:
            rows = [r for r in rows if r.namespace.startswith(f"{principal.user}/")]
        return EndpointList(endpoints=rows)

    # ---- workspace bundles (content-addressed archives; see controller/bundles.py)

    def readable_bundle(bundle_id: str) -> Path:
        """The bundle's file if the caller may read it: a user (or job token) reads only bundles
        they uploaded; another user's answers exactly as a missing one (no existence oracle)."""
        check_bundle_id(bundle_id)
        principal = who()
        if principal.role == "user":
            with controller.db.read() as cur:
                mine = store.user_has_bundle(cur, principal.user or "", bundle_id)
            if not mine:
                raise NotFound(f"bundle {bundle_id} is not on this controller (never uploaded, or collected)")
        return controller.bundles.open_path(bundle_id)

    @app.head("/api/v1/bundles/{bundle_id}")
    def bundle_exists(bundle_id: str) -> Response:
        size = readable_bundle(bundle_id).stat().st_size
        return Response(status_code=200, headers={"content-length": str(size)})

    @app.get("/api/v1/bundles/{bundle_id}")
    def get_bundle(bundle_id: str) -> FileResponse:
        return FileResponse(readable_bundle(bundle_id), media_type="application/gzip")

    @app.put("/api/v1/bundles/{bundle_id}", status_code=201)
    async def put_bundle(bundle_id: str, request: Request) -> Response:
        principal = who()
        principal.may_use_jobs()
        declared = request.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > controller.bundles.max_upload_bytes:
            raise InvalidArgument(
                f"the bundle is {declared} bytes, over this controller's {controller.bundles.max_upload_bytes}-byte limit"
            )
        created = await run_in_threadpool(controller.bundles.put, bundle_id, await request.body())
        if principal.role == "user":  # 201 when new to this user, whoever else uploaded the same bytes

            def own() -> bool:
                with controller.db.transaction() as cur:
                    return store.add_bundle_owner(cur, bundle_id, principal.user or "")

            created = await run_in_threadpool(own)
        return Response(status_code=201 if created else 200)

    @app.post("/api/v1/jobs", response_model=SubmitResponse, openapi_extra=json_body(JobSpec))
    async def submit(request: Request) -> Response:
        spec = await read_model(request, JobSpec)
        return await run_in_threadpool(submit_one, spec)

    def submit_one(spec: JobSpec) -> Response:
        spec = as_caller(spec)
        if spec.parent_job_id:
            owned_job(spec.parent_job_id)
        job_id = controller.submit(spec, user=spec.user, admin=who().is_admin)
        return model_response(SubmitResponse(job_id=job_id))

    @app.post("/api/v1/jobs:batch", response_model=SubmitManyResponse)
    def submit_many(request: SubmitManyRequest) -> Response:
        """Submit several jobs in one call, in order, each checked as a single submit is: all of
        them in one transaction, or none if one is rejected (the error names it)."""
        specs = [as_caller(spec) for spec in request.jobs]
        for parent in {spec.parent_job_id for spec in specs if spec.parent_job_id}:
            owned_job(parent)
        job_ids = controller.submit_many(specs, admin=who().is_admin)
        return model_response(SubmitManyResponse(job_ids=job_ids))

    def as_caller(spec: JobSpec) -> JobSpec:
        """A user's job is always submitted as that user, whatever the spec says."""
        principal = who()
        principal.may_use_jobs()
        if principal.job_scope is not None and not spec.parent_job_id:
            raise PermissionDenied("a job token submits sub-jobs of its own job only")
        if principal.role == "user":
            if spec.bundle_id is not None:  # another user's bundle id: as if it was never uploaded
                with controller.db.read() as cur:
                    mine = store.user_has_bundle(cur, principal.user or "", spec.bundle_id)
                if not mine:
                    raise FailedPrecondition(f"bundle {spec.bundle_id} was never uploaded to this controller")
            return spec.model_copy(update={"user": principal.user})
        return spec

    @app.get("/api/v1/jobs", response_model=JobList)
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
                parent=_job_id(parent) if parent else None,
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

    add_log_routes(
        app,
        controller,
        who=who,
        owned_job=owned_job,
        owned_task=owned_task,
        fallback_task_logs=live_task_logs,
    )

    @app.post("/api/v1/jobs/{job_path:path}:stop", response_model=StopResponse)
    def stop_job(job_path: str) -> Response:
        job_id = owned_job(_job_id(job_path))
        return model_response(StopResponse(job_id=job_id, state=controller.stop_job(job_id)))

    @app.get("/api/v1/jobs/{job_path:path}:callable")
    def job_callable(job_path: str) -> Response:
        """The pickled callable of a callable job, for runtimes that cannot carry it inline
        (a Kubernetes pod fetches a large one here instead of holding it in its own object)."""
        job_id = owned_job(_job_id(job_path))
        with controller.db.read() as cur:
            row = store.get_job(cur, job_id)
        if row is None:
            raise NotFound(f"job {job_id} does not exist")
        entrypoint = row.spec.entrypoint
        if entrypoint.kind != "callable" or not entrypoint.callable_b64:
            raise NotFound(f"job {job_id} runs a command, not a Python callable")
        payload = base64.b64decode(entrypoint.callable_b64)
        return Response(content=payload, media_type="application/octet-stream")

    @app.get("/api/v1/jobs/{job_path:path}:results", response_model=TaskResults)
    def job_results(job_path: str) -> Response:
        """What the job's callable tasks returned or raised (their current attempts'), by task index."""
        job_id = owned_job(_job_id(job_path))
        with controller.db.read() as cur:
            if store.get_job(cur, job_id) is None:
                raise NotFound(f"job {job_id} does not exist")
            return model_response(TaskResults(results=results.for_job(cur, job_id)))

    @app.post("/api/v1/tasks/{task_path:path}:result", status_code=204)
    def post_task_result(task_path: str, body: TaskResult) -> Response:
        """A callable task's runner posts what its attempt returned (or raised), before it exits."""
        task_id = owned_task(_job_id(task_path))
        with controller.db.transaction() as cur:
            results.save(cur, task_id, body)
        return Response(status_code=204)

    @app.get("/api/v1/jobs/{job_path:path}:events")
    def job_events(job_path: str, limit: int = Query(default=200, ge=1, le=2000)) -> dict[str, object]:
        job_id = owned_job(_job_id(job_path))
        with controller.db.read() as cur:
            if store.get_job(cur, job_id) is None:
                raise NotFound(f"job {job_id} does not exist")
            rows = store.job_events(cur, job_id, limit)
        return {"events": [dataclasses.asdict(r) for r in rows]}

    @app.get("/api/v1/jobs/{job_path:path}", response_model=JobDetail)
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
        job_id = _job_id(job_path)
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

    @app.get("/api/v1/tasks/{task_path:path}:status")
    def task_process_status(task_path: str, attempt: str | None = None) -> dict[str, Any]:
        """The attempt's processes (WORKER: from its worker daemon) or its pod (KUBERNETES)."""
        task_id = owned_task(_job_id(task_path))
        return controller.require_backend().attempt_status(controller.attempt_ref(task_id, attempt))

    @app.post("/api/v1/tasks/{task_path:path}:exec", response_model=ExecResponse)
    def task_exec(task_path: str, request: ExecRequest, attempt: str | None = None) -> ExecResponse:
        """Run a command beside a running task: in its worker's working directory, or in its pod."""
        task_id = owned_task(_job_id(task_path))
        return controller.require_backend().attempt_exec(controller.attempt_ref(task_id, attempt), request)

    @app.post("/api/v1/tasks/{task_path:path}:profile")
    def task_profile(
        task_path: str,
        kind: Literal["cpu", "threads", "memory"] = "threads",
        duration_s: float = Query(default=10.0, gt=0, le=MAX_PROFILE_S),
        format: Literal["svg", "text"] = "text",
        attempt: str | None = None,
    ) -> Response:
        """Profile a running task with py-spy or memray (``iris job profile``): text, or an SVG
        flame graph (``kind=cpu&format=svg``). Runs beside the task as exec does (owner or admin)."""
        if format == "svg" and kind != "cpu":
            raise InvalidArgument("only kind=cpu makes an SVG (a flame graph)")
        task_id = owned_task(_job_id(task_path))
        request = ExecRequest(
            argv=profile_argv(kind, duration_s, format), timeout_s=exec_timeout(kind, duration_s)
        )
        result = controller.require_backend().attempt_exec(controller.attempt_ref(task_id, attempt), request)
        if result.exit_code != 0:
            raise FailedPrecondition(
                f"cannot profile {task_id}: {failure_sentence(result.stderr, result.exit_code)}"
            )
        if format == "svg":
            return Response(result.stdout, media_type="image/svg+xml")
        text = top_functions(result.stdout) if kind == "cpu" else result.stdout
        return Response(text, media_type="text/plain; charset=utf-8")

    @app.post("/api/v1/workers/register", response_model=RegisterResponse)
    def register(req: RegisterRequest) -> Response:
        who().may_act_as_worker()
        return model_response(controller.register_worker(req))

    @app.post("/api/v1/workers/{worker_id}/nudge", status_code=204)
    async def nudge(worker_id: str) -> Response:
        """On the event loop: it only marks the worker and wakes the control loop."""
        who().may_act_as_worker()
        if not controller.nudge(worker_id):
            raise NotFound(f"worker {worker_id} is not registered")
        return Response(status_code=204)

    @app.get("/api/v1/workers", response_model=WorkerList)
    def list_workers() -> WorkerList:
        if "workers" not in dashboard_backend_descriptor(controller).capabilities:
            raise NotImplementedForBackend(
                "this controller runs the kubernetes backend: there is no worker store (see the cluster view)"
            )
        with controller.db.read() as cur:
            workers = store.list_workers(cur)
            usage = store.worker_usage(cur)
        used: dict[str, dict[str, int]] = {}
        running: dict[str, list[str]] = {}
        for u in usage:
            acc = used.setdefault(u.worker_id, {"cpu_millicores": 0, "memory_bytes": 0, "disk_bytes": 0})
            acc["cpu_millicores"] += u.resources.cpu_millicores
            acc["memory_bytes"] += u.resources.memory_bytes
            acc["disk_bytes"] += u.resources.disk_bytes
            running.setdefault(u.worker_id, []).append(u.task_id)
        if not who().is_admin:  # a user sees their own tasks on a worker, not others' job names
            mine = f"/{who().user}/"
            running = {w: [t for t in ts if t.startswith(mine)] for w, ts in running.items()}
        out = []
        cordons = controller.cordons
        for w in workers:
            cordon = cordons.get(w.worker_id)
            shown = None
            if cordon is not None:
                shown = "CORDONED"
                if cordon.mode == "drain":
                    shown = "DRAINING" if w.worker_id in running else "DRAINED"
            out.append(
                WorkerInfo(
                    worker_id=w.worker_id,
                    address=w.address,
                    status=WorkerStatus(controller.health.status(w.worker_id).value),
                    capacity=w.capacity,
                    used=used.get(w.worker_id, {"cpu_millicores": 0, "memory_bytes": 0}),
                    attributes=w.attributes,
                    registered_at=w.registered_at,
                    last_contact_at=controller.health.last_reached(w.worker_id) or w.last_contact_at,
                    consecutive_failures=controller.health.consecutive_failures(w.worker_id),
                    running_tasks=running.get(w.worker_id, []),
                    slice_id=w.slice_id,
                    scale_group=w.scale_group,
                    health=w.health,
                    cordon=shown,
                    cordon_reason=cordon.reason if cordon is not None else None,
                    cordoned_at=cordon.since if cordon is not None else None,
                    cordon_automatic=cordon.automatic if cordon is not None else False,
                )
            )
        return WorkerList(workers=out)

    def admin_only(what: str) -> None:
        if not who().is_admin:
            raise PermissionDenied(f"only an admin may {what}")

    @app.post("/api/v1/workers/{worker_id}:cordon", status_code=204)
    def cordon(worker_id: str, body: CordonRequest) -> Response:
        """No new work on the worker; what runs there runs on."""
        admin_only("cordon workers")
        controller.cordon_worker(worker_id, "cordon", body.reason)
        return Response(status_code=204)

    @app.post("/api/v1/workers/{worker_id}:drain", status_code=204)
    def drain(worker_id: str, body: CordonRequest) -> Response:
        """No new work; running tasks finish, or are moved elsewhere after the drain grace."""
        admin_only("drain workers")
        controller.cordon_worker(worker_id, "drain", body.reason)
        return Response(status_code=204)

    @app.post("/api/v1/workers/{worker_id}:uncordon", status_code=204)
    def uncordon(worker_id: str) -> Response:
        admin_only("uncordon workers")
        if not controller.uncordon_worker(worker_id):
            raise NotFound(f"worker {worker_id} is not cordoned or draining")
        return Response(status_code=204)

    if dashboard_dir is not None and dashboard_dir.exists():
        from fastapi.staticfiles import StaticFiles

        app.mount("/", StaticFiles(directory=str(dashboard_dir), html=True), name="dashboard")
    return app
