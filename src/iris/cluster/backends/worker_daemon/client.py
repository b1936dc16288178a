"""HTTP client for worker daemons: concurrent reconcile fan-out, log reads, exec and status."""

from __future__ import annotations

import json
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

from iris.rpc.errors import Unavailable, error_from_body
from iris.rpc.models import ExecRequest, ExecResponse, LogsResponse, ReconcileRequest, ReconcileResponse
from iris.rpc.signing import sign_request, worker_secret
from iris.rpc.transport import KeepAliveTransport, TransportError


@dataclass(frozen=True, slots=True)
class ReconcileOutcome:
    worker_id: str
    response: ReconcileResponse | None
    error: str | None = None
    impostor: bool = False
    # False only when the request surely never reached the worker (its connection failed).
    may_have_arrived: bool = True


class WorkerRpcClient:
    """``master_key`` signs every call (iris.rpc.signing): a worker obeys only the controller that
    registered it. Without one (tests of the transport alone) calls go unsigned."""

    def __init__(
        self, *, timeout_s: float = 3.0, parallelism: int = 64, master_key: bytes | None = None
    ) -> None:
        self._master_key = master_key
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
        body = request.model_dump_json(exclude_none=True).encode()
        try:
            resp = self._http.request(
                "POST", address, "/reconcile", body, headers=self._sign(address, "POST", "/reconcile", body)
            )
        except TransportError as exc:
            return ReconcileOutcome(worker_id, None, f"unreachable: {exc}", may_have_arrived=exc.sent)
        if resp.status == 401:
            return ReconcileOutcome(
                worker_id, None, f"the worker refused our signature: {_message(resp.body)}"
            )
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
            resp = self._http.request(
                method,
                address,
                path,
                body,
                timeout_s=timeout_s,
                headers=self._sign(address, method, path, body),
            )
        except TransportError as exc:
            raise Unavailable(f"the worker at {address} did not answer ({exc})") from None
        if resp.status != 200:
            try:
                parsed = json.loads(resp.body)
            except ValueError:
                parsed = None
            raise error_from_body(resp.status, parsed)
        return resp.body

    def _sign(self, address: str, method: str, target: str, body: bytes | None) -> dict[str, str] | None:
        if self._master_key is None:
            return None
        return sign_request(worker_secret(self._master_key, address), method, target, body)

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)


def _message(body: bytes) -> str:
    try:
        return str(json.loads(body)["error"]["message"])
    except (ValueError, KeyError, TypeError):
        return body[:200].decode(errors="replace")
