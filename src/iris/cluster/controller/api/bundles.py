"""Workspace bundles (content-addressed archives; see controller/bundles.py)."""

from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter, Request
from fastapi.responses import FileResponse, Response
from starlette.concurrency import run_in_threadpool

from iris.cluster.controller import store
from iris.cluster.controller.api.common import who
from iris.cluster.controller.bundles import check_bundle_id
from iris.cluster.controller.controller import Controller
from iris.rpc.errors import (
    InvalidArgument,
    NotFound,
)


def add_routes(router: APIRouter, controller: Controller) -> None:

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

    @router.head("/api/v1/bundles/{bundle_id}")
    def bundle_exists(bundle_id: str) -> Response:
        size = readable_bundle(bundle_id).stat().st_size
        return Response(status_code=200, headers={"content-length": str(size)})

    @router.get("/api/v1/bundles/{bundle_id}")
    def get_bundle(bundle_id: str) -> FileResponse:
        return FileResponse(readable_bundle(bundle_id), media_type="application/gzip")

    @router.put("/api/v1/bundles/{bundle_id}", status_code=201)
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
