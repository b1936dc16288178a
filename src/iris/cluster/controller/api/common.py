"""What every resource router of the controller's API shares: the caller (``who``), who may see
which job, job ids from URL paths, and the fast JSON body and response helpers."""

from __future__ import annotations

from contextvars import ContextVar
from typing import Any, TypeVar

from fastapi import Request
from fastapi.responses import Response
from pydantic import BaseModel, ValidationError

from iris.cluster.controller import store
from iris.cluster.controller.auth import Principal
from iris.cluster.controller.controller import Controller
from iris.rpc.errors import FailedPrecondition, InvalidArgument, NotFound, PermissionDenied
from iris.rpc.http_errors import validation_message
from iris.rpc.models import JobSpec

M = TypeVar("M", bound=BaseModel)

# Set by the Authenticate middleware (api/auth.py) for every /api/ request.
principal_var: ContextVar[Principal] = ContextVar("iris_principal")


def who() -> Principal:
    """The caller of the current request."""
    return principal_var.get()


def model_response(model: BaseModel) -> Response:
    """A model already built and checked by our own code, serialized once: returned through
    ``response_model`` FastAPI would validate and serialize it again (a third of a 1,000-task
    page's time), and for a sync route do that on a second trip through the thread pool (most of
    a submit's wait on a busy controller). The route keeps ``response_model`` for its schema."""
    return Response(model.model_dump_json(), media_type="application/json")


def job_id_from_path(path: str) -> str:
    path = path.strip("/")
    if not path:
        raise InvalidArgument("missing job id")
    return "/" + path


def json_body(model: type[BaseModel]) -> dict[str, Any]:
    """OpenAPI for a route that reads its JSON body itself (``read_model``): the model's schema,
    inline; the models it nests are those other routes already put in the components."""
    schema = model.model_json_schema(ref_template="#/components/schemas/{model}")
    schema.pop("$defs", None)
    return {"requestBody": {"required": True, "content": {"application/json": {"schema": schema}}}}


async def read_model(request: Request, model: type[M]) -> M:
    """The request's JSON body as ``model``, parsed straight from the bytes by pydantic-core (the
    hot submit routes: FastAPI's own body handling costs several times more); a bad body is a
    400 in the same words as FastAPI's validation errors."""
    try:
        return model.model_validate_json(await request.body())
    except ValidationError as exc:
        raise InvalidArgument(validation_message(exc)) from None


def owned_job(controller: Controller, job_id: str) -> str:
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


def owned_task(controller: Controller, task_id: str) -> str:
    owned_job(controller, task_id.rsplit("/", 1)[0])
    return task_id


def as_caller(controller: Controller, spec: JobSpec) -> JobSpec:
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
