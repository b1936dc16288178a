"""The worker's HTTP surface: ``POST /reconcile``, attempt logs/status/exec, ``GET /healthz``, ``GET /metrics``."""

from __future__ import annotations

import json
import threading
from typing import Annotated, Any

from fastapi import FastAPI, Query
from fastapi.responses import Response
from pydantic import ValidationError
from starlette.concurrency import run_in_threadpool

from iris.cluster.runtime import KillReason, SubprocessRuntime
from iris.cluster.runtime.profiling import profile_argv
from iris.cluster.worker.controller_link import ControllerLink
from iris.cluster.worker.health import HealthCache
from iris.cluster.worker.metrics import CONTENT_TYPE, WorkerMetrics
from iris.cluster.worker.reconcile import plan_worker_reconcile
from iris.cluster.worker.rpc_auth import ASGIApp, Receive, Scope, Send, SignedRequestsOnly
from iris.rpc.enums import TERMINAL_TASK_STATES, TaskState
from iris.rpc.errors import FailedPrecondition, InvalidArgument, IrisError
from iris.rpc.http_errors import error_body, install_error_handlers
from iris.rpc.models import (
    AttemptObservation,
    ExecRequest,
    ExecResponse,
    LogsResponse,
    ReconcileRequest,
    ReconcileResponse,
    RunSpec,
)
from iris.rpc.signing import RequestVerifier


class WorkerService:
    """Applies reconcile requests to the runtime. One reconcile at a time (the protocol is level-triggered)."""

    def __init__(
        self, worker_id: str, runtime: SubprocessRuntime, health: HealthCache, link: ControllerLink | None
    ) -> None:
        self.worker_id = worker_id
        self._runtime = runtime
        self._health = health
        self._link = link
        self._lock = threading.Lock()
        self._spec_cache: dict[str, RunSpec] = {}
        # Zombies killed and reported by an earlier reconcile, while their process trees end.
        self._killed_zombies: set[str] = set()

    def reconcile(self, request: ReconcileRequest) -> ReconcileResponse:
        if request.worker_id != self.worker_id:
            raise FailedPrecondition(
                f"this is worker {self.worker_id}, not {request.worker_id}: the address now belongs to another worker"
            )
        if self._link is not None:
            self._link.reached(renew_lease=request.renew_lease)
        with self._lock:
            local_terminal = self._runtime.terminal_of(entry.attempt_uid for entry in request.attempts)
            self._killed_zombies &= {uid for uid, terminal in local_terminal.items() if not terminal}
            plan = plan_worker_reconcile(
                request.attempts,
                local_terminal,
                self._spec_cache,
                self._runtime.live_task_ids(),
                self._killed_zombies,
            )
            for spec in plan.cache:
                self._spec_cache[spec.attempt_uid] = spec
            for uid, reason in plan.stop:
                self._runtime.kill(uid, KillReason.STOP, f"stopped by the controller ({reason.value})")
            for old, new in plan.supersede:
                self._runtime.kill(old, KillReason.STOP, f"superseded by attempt {new} of the same task")
            for uid in plan.zombies:
                self._runtime.kill(uid, KillReason.ZOMBIE)
            self._killed_zombies.update(plan.zombies)
            for uid, error in plan.reject:
                self._runtime.record_failure(uid, error)
            self._runtime.start_many(plan.start)
            self._runtime.pin(plan.desired)
            # Every change so far (including the starts above) is in this answer: no nudge needed for it.
            covered = self._link.change_mark() if self._link else 0
            observations = []
            for uid in plan.observe:
                snapshot = self._runtime.snapshot(uid)
                if snapshot is None:
                    observations.append(
                        AttemptObservation(attempt_uid=uid, state=TaskState.MISSING, runtime_released=True)
                    )
                else:
                    observations.append(snapshot)
                    if snapshot.state in TERMINAL_TASK_STATES:
                        self._spec_cache.pop(uid, None)
            for uid in [uid for uid in self._spec_cache if uid not in plan.desired]:
                del self._spec_cache[uid]
        if self._link is not None:
            self._link.reconciled(covered)
        return ReconcileResponse(
            worker_id=self.worker_id, observations=observations, health=self._health.current()
        )

    def logs(self, attempt_uid: str, offset: int, limit: int) -> LogsResponse:
        return self._runtime.read_logs(attempt_uid, offset, limit)

    def process_status(self, attempt_uid: str) -> dict[str, Any]:
        return self._runtime.process_status(attempt_uid)

    def exec(self, attempt_uid: str, request: ExecRequest) -> ExecResponse:
        if request.profile is not None:  # the profiler's command is the worker's, never the caller's
            p = request.profile
            argv = profile_argv(p.kind, p.duration_s, p.format)
            return ExecResponse(**self._runtime.exec(attempt_uid, argv, request.timeout_s, profiler=True))
        return ExecResponse(**self._runtime.exec(attempt_uid, request.argv, request.timeout_s))


def _first_error(exc: ValidationError) -> str:
    first = exc.errors()[0]
    where = ".".join(str(part) for part in first.get("loc", ()))
    return f"{where}: {first['msg']}" if where else first["msg"]


class ReconcileRoute:
    """ASGI: ``POST /reconcile`` answered directly (it comes every round, from the controller
    only, already verified by ``SignedRequestsOnly``); every other request goes on to FastAPI.

    The request is parsed straight from the bytes by pydantic-core and applied on a thread (it
    starts processes); errors are the API's JSON errors: 400 for a malformed request, the
    ``IrisError``'s own status otherwise."""

    def __init__(self, app: ASGIApp, service: WorkerService, metrics: WorkerMetrics | None) -> None:
        self.app = app
        self.service = service
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] != "/reconcile" or scope["method"] != "POST":
            await self.app(scope, receive, send)
            return
        body = bytearray()
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            body += message.get("body", b"")
            if not message.get("more_body", False):
                break
        status, payload = await run_in_threadpool(self._answer, bytes(body))
        await send(
            {
                "type": "http.response.start",
                "status": status,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(payload)).encode()),
                ],
            }
        )
        await send({"type": "http.response.body", "body": payload})

    def _answer(self, body: bytes) -> tuple[int, bytes]:
        try:
            request = ReconcileRequest.model_validate_json(body)
        except ValidationError as exc:
            return _error(InvalidArgument(f"invalid reconcile request: {_first_error(exc)}"))
        try:
            if self.metrics is None:
                answer = self.service.reconcile(request)
            else:
                with self.metrics.time_reconcile():
                    answer = self.service.reconcile(request)
        except IrisError as exc:
            return _error(exc)
        return 200, answer.model_dump_json().encode()


def _error(exc: IrisError) -> tuple[int, bytes]:
    return exc.status_code, json.dumps(error_body(exc.code, exc.message)).encode()


def create_app(
    service: WorkerService, verifier: RequestVerifier, metrics: WorkerMetrics | None = None
) -> FastAPI:
    """Every route but ``GET /healthz`` and ``GET /metrics`` answers only requests signed by the
    controller (rpc_auth). ``POST /reconcile``, the controller's call every round, is answered
    by ``ReconcileRoute`` straight after that check, without the framework's layers."""
    app = FastAPI(title=f"Iris worker {service.worker_id}", docs_url=None, redoc_url=None, openapi_url=None)
    app.add_middleware(ReconcileRoute, service=service, metrics=metrics)
    app.add_middleware(SignedRequestsOnly, verifier=verifier)

    install_error_handlers(app)

    @app.get("/attempts/{attempt_uid}/logs", response_model=LogsResponse)
    def logs(
        attempt_uid: str,
        offset: Annotated[int, Query(ge=0)] = 0,
        limit: Annotated[int, Query(ge=1, le=10_000)] = 1000,
    ) -> Response:
        page = service.logs(attempt_uid, offset, limit)
        return Response(page.model_dump_json(), media_type="application/json")

    @app.get("/attempts/{attempt_uid}/status")
    def process_status(attempt_uid: str) -> dict[str, Any]:
        return service.process_status(attempt_uid)

    @app.post("/attempts/{attempt_uid}/exec", response_model=ExecResponse)
    def exec_in_attempt(attempt_uid: str, request: ExecRequest) -> ExecResponse:
        return service.exec(attempt_uid, request)

    @app.get("/healthz")
    def healthz() -> dict[str, object]:
        return {"worker_id": service.worker_id, "ok": True}

    if metrics is not None:

        @app.get("/metrics")
        def prometheus_metrics() -> Response:
            """Prometheus text exposition (docs/operations.md lists every series)."""
            return Response(metrics.exposition(), media_type=CONTENT_TYPE)

    return app
