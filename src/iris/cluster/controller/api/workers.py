"""Workers: register, nudge, list, cordon, drain, uncordon."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import Response

from iris.cluster.controller import store
from iris.cluster.controller.api.common import model_response, who
from iris.cluster.controller.backend import dashboard_backend_descriptor
from iris.cluster.controller.controller import Controller
from iris.rpc.errors import (
    NotFound,
    NotImplementedForBackend,
    PermissionDenied,
)
from iris.rpc.models import (
    CordonRequest,
    RegisterRequest,
    RegisterResponse,
    ResourceSpec,
    WorkerInfo,
    WorkerList,
    WorkerStatus,
)


def add_routes(router: APIRouter, controller: Controller) -> None:

    @router.post("/api/v1/workers/register", response_model=RegisterResponse)
    def register(req: RegisterRequest) -> Response:
        who().may_act_as_worker()
        return model_response(controller.register_worker(req))

    @router.post("/api/v1/workers/{worker_id}/nudge", status_code=204)
    async def nudge(worker_id: str) -> Response:
        """On the event loop: it only marks the worker and wakes the control loop."""
        who().may_act_as_worker()
        if not controller.nudge(worker_id):
            raise NotFound(f"worker {worker_id} is not registered")
        return Response(status_code=204)

    @router.get("/api/v1/workers", response_model=WorkerList)
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
        out: list[WorkerInfo] = []
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
                    used=ResourceSpec.model_validate(
                        used.get(w.worker_id, {"cpu_millicores": 0, "memory_bytes": 0})
                    ),
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

    @router.post("/api/v1/workers/{worker_id}:cordon", status_code=204)
    def cordon(worker_id: str, body: CordonRequest) -> Response:
        """No new work on the worker; what runs there runs on."""
        admin_only("cordon workers")
        controller.cordon_worker(worker_id, "cordon", body.reason)
        return Response(status_code=204)

    @router.post("/api/v1/workers/{worker_id}:drain", status_code=204)
    def drain(worker_id: str, body: CordonRequest) -> Response:
        """No new work; running tasks finish, or are moved elsewhere after the drain grace."""
        admin_only("drain workers")
        controller.cordon_worker(worker_id, "drain", body.reason)
        return Response(status_code=204)

    @router.post("/api/v1/workers/{worker_id}:uncordon", status_code=204)
    def uncordon(worker_id: str) -> Response:
        admin_only("uncordon workers")
        if not controller.uncordon_worker(worker_id):
            raise NotFound(f"worker {worker_id} is not cordoned or draining")
        return Response(status_code=204)
