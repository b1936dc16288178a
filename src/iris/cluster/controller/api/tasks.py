"""Tasks: a callable's result, and a running attempt's processes, exec and profile."""

from __future__ import annotations

from functools import partial
from typing import Any, Literal

from fastapi import APIRouter, Query
from fastapi.responses import Response

from iris.cluster.controller import results
from iris.cluster.controller.api import common as access
from iris.cluster.controller.api.common import job_id_from_path
from iris.cluster.controller.controller import Controller
from iris.cluster.runtime.profiling import (
    MAX_PROFILE_S,
    exec_timeout,
    failure_sentence,
    profile_argv,
    top_functions,
)
from iris.rpc.errors import (
    FailedPrecondition,
    InvalidArgument,
)
from iris.rpc.models import (
    ExecRequest,
    ExecResponse,
    ProfileRequest,
    TaskResult,
)


def add_routes(router: APIRouter, controller: Controller) -> None:
    owned_task = partial(access.owned_task, controller)

    @router.post("/api/v1/tasks/{task_path:path}:result", status_code=204)
    def post_task_result(task_path: str, body: TaskResult) -> Response:
        """A callable task's runner posts what its attempt returned (or raised), before it exits."""
        task_id = owned_task(job_id_from_path(task_path))
        with controller.db.transaction() as cur:
            results.save(cur, task_id, body)
        return Response(status_code=204)

    @router.get("/api/v1/tasks/{task_path:path}:status")
    def task_process_status(task_path: str, attempt: str | None = None) -> dict[str, Any]:
        """The attempt's processes (WORKER: from its worker daemon) or its pod (KUBERNETES)."""
        task_id = owned_task(job_id_from_path(task_path))
        return controller.require_backend().attempt_status(controller.attempt_ref(task_id, attempt))

    @router.post("/api/v1/tasks/{task_path:path}:exec", response_model=ExecResponse)
    def task_exec(task_path: str, request: ExecRequest, attempt: str | None = None) -> ExecResponse:
        """Run a command beside a running task: in its worker's working directory, or in its pod."""
        task_id = owned_task(job_id_from_path(task_path))
        return controller.require_backend().attempt_exec(controller.attempt_ref(task_id, attempt), request)

    @router.post("/api/v1/tasks/{task_path:path}:profile")
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
        task_id = owned_task(job_id_from_path(task_path))
        request = ExecRequest(
            argv=profile_argv(kind, duration_s, format),
            timeout_s=exec_timeout(kind, duration_s),
            profile=ProfileRequest(kind=kind, duration_s=duration_s, format=format),
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
