"""The cluster as a whole: status, dashboard info, client config, stats, time series, the scheduler's queue, the autoscaler."""

from __future__ import annotations

from fastapi import APIRouter, Query, Request
from fastapi.responses import Response

from iris import __version__
from iris.cluster.controller import store
from iris.cluster.controller.api.common import model_response, who
from iris.cluster.controller.backend import dashboard_backend_descriptor
from iris.cluster.controller.controller import Controller
from iris.rpc.errors import NotImplementedForBackend
from iris.rpc.models import (
    ClientConfig,
    ClusterStatus,
    DashboardInfo,
)


def add_routes(router: APIRouter, controller: Controller) -> None:

    @router.get("/api/v1/cluster", response_model=ClusterStatus)
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

    @router.get("/api/v1/dashboard", response_model=DashboardInfo)
    def dashboard_info() -> DashboardInfo:
        dash = dashboard_backend_descriptor(controller)
        return DashboardInfo(name=dash.name, capabilities=dash.capabilities)

    @router.get("/api/v1/client-config", response_model=ClientConfig)
    def client_config() -> ClientConfig:
        """What clients apply at submission (``forward_env`` of the cluster config)."""
        return ClientConfig(forward_env=controller.forward_env)

    @router.get("/api/v1/stats")
    def stats() -> dict[str, object]:
        return {
            "version": __version__,
            "uptime_s": controller.clock() - controller.started_at,
            "db_bytes": controller.db.size_bytes(),
            "loop": dict(controller.round_stats),
        }

    @router.get("/api/v1/timeseries")
    def timeseries() -> dict[str, object]:
        """Samples of task counts every few seconds: pending, running and cumulative outcomes."""
        return {"interval_s": controller.timeseries.interval_s, "points": list(controller.timeseries.points)}

    @router.get("/api/v1/scheduler")
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

    @router.get("/api/v1/autoscaler")
    def autoscaler_status() -> dict[str, object]:
        autoscaler = controller.autoscaler
        if not controller.autoscaler_configured or autoscaler is None:
            raise NotImplementedForBackend("no autoscaler is configured on this controller")
        return autoscaler.status_view()

    @router.get("/api/v1/cluster/overview")
    def cluster_overview() -> dict[str, object]:
        """KUBERNETES: pods by phase, Kueue admission, nodes. WORKER controllers use /api/v1/workers."""
        return controller.require_backend().overview()
