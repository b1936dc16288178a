"""The WORKER backend behind the controller's ``TaskBackend`` protocol: worker daemons over HTTP."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from iris.cluster.backends.worker_daemon.client import WorkerRpcClient
from iris.cluster.types import AttemptRef, DesiredGroup, GroupReport
from iris.rpc.errors import FailedPrecondition, NotImplementedForBackend
from iris.rpc.models import ExecRequest, ExecResponse, LogsResponse, ReconcileRequest


class WorkerDaemonBackend:
    """Reconcile fans out to every worker at once; attempt RPCs go to the attempt's worker."""

    def __init__(self, rpc: WorkerRpcClient | None = None) -> None:
        self._rpc = rpc or WorkerRpcClient()

    def converge(self, groups: Sequence[DesiredGroup]) -> list[GroupReport]:
        plans = {
            g.worker_id: (
                g.address,
                ReconcileRequest(worker_id=g.worker_id, attempts=list(g.attempts), renew_lease=g.renew_lease),
            )
            for g in groups
            if g.worker_id is not None and g.address is not None
        }
        reports = []
        for out in self._rpc.reconcile_many(plans):
            if out.response is None:
                reports.append(
                    GroupReport(out.worker_id, None, error=out.error, may_have_arrived=out.may_have_arrived)
                )
            else:
                reports.append(
                    GroupReport(out.worker_id, tuple(out.response.observations), health=out.response.health)
                )
        return reports

    def attempt_logs(self, ref: AttemptRef, *, offset: int, limit: int) -> LogsResponse:
        return self._rpc.read_logs(_address(ref), ref.attempt_uid, offset=offset, limit=limit)

    def attempt_exec(self, ref: AttemptRef, request: ExecRequest) -> ExecResponse:
        return self._rpc.exec(_address(ref), ref.attempt_uid, request)

    def attempt_status(self, ref: AttemptRef) -> dict[str, Any]:
        address = _address(ref)
        return {"kind": "process", "target": address, **self._rpc.process_status(address, ref.attempt_uid)}

    def overview(self) -> dict[str, Any]:
        raise NotImplementedForBackend("the cluster view exists only for the kubernetes backend")

    def watch(self, on_change: Callable[[], None]) -> None:
        """Workers nudge the controller over its API; there is nothing to watch here."""

    def set_controller_url(self, url: str) -> None:
        """Workers are told the controller's address when they start, not by the backend."""

    def close(self) -> None:
        self._rpc.close()


def _address(ref: AttemptRef) -> str:
    if ref.target.address is None:
        raise FailedPrecondition(f"attempt {ref.attempt_uid} has no worker address")
    return ref.target.address
