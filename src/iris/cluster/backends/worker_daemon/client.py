"""HTTP client for worker daemons: one pooled connection set, concurrent reconcile fan-out."""

from __future__ import annotations

from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import httpx

from iris.rpc.errors import IrisError, Unavailable, error_from_body
from iris.rpc.models import ExecRequest, ExecResponse, LogsResponse, ReconcileRequest, ReconcileResponse


@dataclass(frozen=True, slots=True)
class ReconcileOutcome:
    worker_id: str
    response: ReconcileResponse | None
    error: str | None = None
    impostor: bool = False


class WorkerRpcClient:
    def __init__(self, *, timeout_s: float = 3.0, parallelism: int = 64) -> None:
        limits = httpx.Limits(max_connections=parallelism * 2, max_keepalive_connections=parallelism * 2)
        self._http = httpx.Client(timeout=timeout_s, limits=limits)
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
            resp = self._http.post(
                f"http://{address}/reconcile",
                content=request.model_dump_json(exclude_none=True),
                headers={"content-type": "application/json"},
            )
        except httpx.HTTPError as exc:
            return ReconcileOutcome(worker_id, None, f"unreachable: {type(exc).__name__}: {exc}")
        if resp.status_code == 409:
            return ReconcileOutcome(worker_id, None, "another worker answers at this address", impostor=True)
        if resp.status_code != 200:
            return ReconcileOutcome(worker_id, None, f"reconcile failed with HTTP {resp.status_code}")
        try:
            parsed = ReconcileResponse.model_validate_json(resp.content)
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
        try:
            resp = self._http.get(
                f"http://{address}/attempts/{attempt_uid}/logs", params={"offset": offset, "limit": limit}
            )
        except httpx.HTTPError as exc:
            raise Unavailable(f"the worker at {address} did not answer ({type(exc).__name__})") from None
        if resp.status_code != 200:
            raise _error(resp)
        return LogsResponse.model_validate_json(resp.content)

    def process_status(self, address: str, attempt_uid: str) -> dict[str, Any]:
        return self._call("GET", address, f"/attempts/{attempt_uid}/status").json()

    def exec(self, address: str, attempt_uid: str, request: ExecRequest) -> ExecResponse:
        resp = self._call(
            "POST", address, f"/attempts/{attempt_uid}/exec", content=request.model_dump_json(),
            timeout=request.timeout_s + 5,
        )  # fmt: skip
        return ExecResponse.model_validate_json(resp.content)

    def _call(self, method: str, address: str, path: str, **kwargs: Any) -> httpx.Response:
        headers = {"content-type": "application/json"} if "content" in kwargs else None
        try:
            resp = self._http.request(method, f"http://{address}{path}", headers=headers, **kwargs)
        except httpx.HTTPError as exc:
            raise Unavailable(f"the worker at {address} did not answer ({type(exc).__name__})") from None
        if resp.status_code != 200:
            raise _error(resp)
        return resp

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
        self._http.close()


def _error(resp: httpx.Response) -> IrisError:
    try:
        body = resp.json()
    except ValueError:
        body = None
    return error_from_body(resp.status_code, body)
