"""The controller's HTTP/JSON API (FastAPI), one router per resource. The dashboard and the CLI
use exactly this surface. A new resource is a module here with ``add_routes(router, controller)``,
listed in ``RESOURCES`` below (before ``jobs``/``tasks`` if its paths could be shadowed). Routes go
straight onto the app's router: FastAPI checks each included sub-router's routes on every request
(~0.05-0.1 ms of controller CPU a request for ten of them)."""

from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI

from iris import __version__
from iris.cluster.controller.api import (
    budgets,
    bundles,
    cluster,
    endpoints,
    health,
    jobs,
    logs,
    secrets,
    tasks,
    workers,
)
from iris.cluster.controller.api.auth import Authenticate
from iris.cluster.controller.controller import Controller
from iris.cluster.controller.cross_site import CrossSiteGuard
from iris.cluster.controller.disk_full import note_disk_full
from iris.cluster.controller.http_guard import HttpGuard
from iris.cluster.controller.metrics import CountsReader, RequestTimer
from iris.rpc.errors import InsufficientStorage, IrisError
from iris.rpc.http_errors import install_error_handlers

# In this order: first match wins, and logs' ``/api/v1/jobs/{path}:logs`` must precede jobs' ``/api/v1/jobs/{path}``.
RESOURCES = (health, cluster, secrets, budgets, endpoints, bundles, logs, jobs, tasks, workers)


def _note_disk_full(exc: IrisError) -> None:
    if isinstance(exc, InsufficientStorage):  # one line per 30 s, not one per refused request
        note_disk_full(exc.message)


def create_app(controller: Controller, *, dashboard_dir: Path | None = None) -> FastAPI:
    app = FastAPI(title="Iris controller", version=__version__, description="Submit, watch and stop jobs.")
    app.add_middleware(RequestTimer, histogram=controller.metrics.api_request_seconds)
    controller.metrics.watch_state(CountsReader(controller))
    app.add_middleware(Authenticate, controller=controller)
    # No tokens: only JSON writes and our own host names (a web page cannot drive the controller).
    app.add_middleware(
        CrossSiteGuard,
        enabled=lambda: not controller.auth.enabled,
        url=lambda: getattr(controller, "controller_url", "") or "",
    )
    app.add_middleware(HttpGuard)  # outermost: bounds every body before anything reads it
    install_error_handlers(app, on_iris_error=_note_disk_full)
    for resource in RESOURCES:
        resource.add_routes(app.router, controller)
    if dashboard_dir is not None and dashboard_dir.exists():
        from fastapi.staticfiles import StaticFiles

        app.mount("/", StaticFiles(directory=str(dashboard_dir), html=True), name="dashboard")
    return app
