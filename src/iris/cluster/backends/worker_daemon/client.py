"""HTTP client for worker daemons: concurrent reconcile fan-out, log reads, exec and status."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

from iris.rpc.errors import Unavailable, error_from_body
from iris.rpc.fan_out import Call, FanOut
from iris.rpc.models import ExecRequest, ExecResponse, LogsResponse, ReconcileRequest, ReconcileResponse
from iris.rpc.signing import sign_request, worker_secret
from iris.rpc.transport import HttpReply, KeepAliveTransport, TransportError


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

    def __init__(self, *, timeout_s: float = 3.0, master_key: bytes | None = None) -> None:
        self._master_key = master_key
        self._http = KeepAliveTransport(timeout_s=timeout_s)
        self._fan_out = FanOut(timeout_s=timeout_s)

    def reconcile_many(self, plans: Mapping[str, tuple[str, ReconcileRequest]]) -> list[ReconcileOutcome]:
        """Send every worker its desired set at once (rpc/fan_out.py): however many workers hang,
        the round costs one timeout window."""
        calls = []
        for address, request in plans.values():
            body = request.model_dump_json(exclude_none=True).encode()
            calls.append(
                Call(address, "POST", "/reconcile", body, self._sign(address, "POST", "/reconcile", body))
            )
        replies = self._fan_out.call_all(calls)
        return [_outcome(worker_id, reply) for worker_id, reply in zip(plans, replies, strict=True)]

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
        self._fan_out.close()
        self._http.close()


def _outcome(worker_id: str, resp: HttpReply | TransportError) -> ReconcileOutcome:
    if isinstance(resp, TransportError):
        return ReconcileOutcome(worker_id, None, f"unreachable: {resp}", may_have_arrived=resp.sent)
    if resp.status == 401:
        return ReconcileOutcome(worker_id, None, f"the worker refused our signature: {_message(resp.body)}")
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


def _message(body: bytes) -> str:
    try:
        return str(json.loads(body)["error"]["message"])
    except (ValueError, KeyError, TypeError):
        return body[:200].decode(errors="replace")
