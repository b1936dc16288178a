"""HTTP client for worker daemons: concurrent reconcile fan-out, log reads, exec and status."""

from __future__ import annotations

import json
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

from iris.cluster.backends.worker_daemon.transport import KeepAliveTransport, TransportError
from iris.rpc.errors import Unavailable, error_from_body
from iris.rpc.models import ExecRequest, ExecResponse, LogsResponse, ReconcileRequest, ReconcileResponse


@dataclass(frozen=True, slots=True)
class ReconcileOutcome:
    worker_id: str
    response: ReconcileResponse | None
    error: str | None = None
    impostor: bool = False


class WorkerRpcClient:
    def __init__(self, *, timeout_s: float = 3.0, parallelism: int = 64) -> None:
        self._http = KeepAliveTransport(timeout_s=timeout_s)
        self._pool = ThreadPoolExecutor(max_workers=parallelism, thread_name_prefix="reconcile")

    def reconcile_many(self, plans: Mapping[str, tuple[str, ReconcileRequest]]) -> list[ReconcileOutcome]:
        """Send every worker its desired set at once; one slow worker costs one timeout window."""
        if not plans:
            return []
        if len(plans) == 1:
            ((worker_id, (address, request)),) = plans.items()
            return [self._reconcile_one(worker_id, address, request)]
        futures = [
            self._pool.submit(self._reconcile_one, wid, addr, req) for wid, (addr, req) in plans.items()
        ]
        return [f.result() for f in futures]

    def _reconcile_one(self, worker_id: str, address: str, request: ReconcileRequest) -> ReconcileOutcome:
        try:
            resp = self._http.request(
                "POST", address, "/reconcile", request.model_dump_json(exclude_none=True).encode()
            )
        except TransportError as exc:
            return ReconcileOutcome(worker_id, None, f"unreachable: {exc}")
        if resp.status == 409:
            return ReconcileOutcome(worker_id, None, "another worker answers at this address", impostor=True)
        if resp.status != 200:
            return ReconcileOutcome(worker_id, None, f"reconcile failed with HTTP {resp.status}")
        try:
            parsed = ReconcileResponse.model_validate_json(resp.body)
        except ValueError as exc:
            return ReconcileOutcome(worker_id, None, f"bad reconcile response: {exc}")
        if parsed.worker_id != worker_id:
            return ReconcileOutcome(
                worker_id, None, f"worker {parsed.worker_id} answered for {worker_id}", impostor=True
            )
        return ReconcileOutcome(worker_id, parsed)

    def read_logs(
        self, address: str, attempt_uid: str, *, offset: int = 0, limit: int = 1000
    ) -> LogsResponse:
        query = urlencode({"offset": offset, "limit": limit})
        return LogsResponse.model_validate_json(
            self._call("GET", address, f"/attempts/{attempt_uid}/logs?{query}")
        )

    def process_status(self, address: str, attempt_uid: str) -> dict[str, Any]:
        return json.loads(self._call("GET", address, f"/attempts/{attempt_uid}/status"))

    def exec(self, address: str, attempt_uid: str, request: ExecRequest) -> ExecResponse:
        body = request.model_dump_json().encode()
        reply = self._call(
            "POST", address, f"/attempts/{attempt_uid}/exec", body, timeout_s=request.timeout_s + 5
        )
        return ExecResponse.model_validate_json(reply)

    def _call(
        self,
        method: str,
        address: str,
        path: str,
        body: bytes | None = None,
        *,
        timeout_s: float | None = None,
    ) -> bytes:
        try:
            resp = self._http.request(method, address, path, body, timeout_s=timeout_s)
        except TransportError as exc:
            raise Unavailable(f"the worker at {address} did not answer ({exc})") from None
        if resp.status != 200:
            try:
                parsed = json.loads(resp.body)
            except ValueError:
                parsed = None
            raise error_from_body(resp.status, parsed)
        return resp.body

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
