"""Endpoints jobs register, visible within their root job's namespace."""

from __future__ import annotations

from functools import partial

from fastapi import APIRouter

from iris.cluster.controller import store
from iris.cluster.controller.api import common as access
from iris.cluster.controller.api.common import job_id_from_path, who
from iris.cluster.controller.controller import Controller
from iris.cluster.types import JobName
from iris.rpc.errors import InvalidArgument
from iris.rpc.models import (
    EndpointInfo,
    EndpointList,
    EndpointRegistration,
)


def add_routes(router: APIRouter, controller: Controller) -> None:
    owned_job = partial(access.owned_job, controller)

    @router.post("/api/v1/endpoints", response_model=EndpointInfo)
    def register_endpoint(reg: EndpointRegistration) -> EndpointInfo:
        owned_job(reg.job_id)
        return controller.register_endpoint(reg)

    @router.get("/api/v1/endpoints", response_model=EndpointList)
    def list_endpoints(job: str | None = None, name: str | None = None) -> EndpointList:
        """Endpoints, optionally only those visible to ``job`` (its root job's namespace)."""
        namespace = None
        if job:
            try:
                namespace = JobName.parse(job_id_from_path(job)).namespace
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
