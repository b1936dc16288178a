"""Liveness (``/healthz``, 503 while the state disk is full) and Prometheus ``/metrics``."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import JSONResponse, Response

from iris import __version__
from iris.cluster.controller.controller import Controller
from iris.cluster.controller.metrics import CONTENT_TYPE


def add_routes(router: APIRouter, controller: Controller) -> None:

    @router.get("/healthz")
    def healthz() -> JSONResponse:
        """Unhealthy (503) while the state disk is full; writes are retried here so it recovers."""
        if controller.db.disk_full_since is not None and not controller.db.probe_write():
            message = f"the controller's state disk is full ({controller.db.path.parent}): it cannot record anything"
            return JSONResponse(
                status_code=503, content={"ok": False, "version": __version__, "error": message}
            )
        return JSONResponse(content={"ok": True, "version": __version__})

    @router.get("/metrics", include_in_schema=False)
    def metrics() -> Response:
        """Prometheus text exposition (docs/operations.md lists every series)."""
        return Response(controller.metrics.exposition(), media_type=CONTENT_TYPE)
