"""Bearer-token authentication and the rules of who may do what.

Tokens come from the cluster config (``auth.tokens``: admin, user or worker). A running task
gets a *job token* minted by the controller (HMAC over its job id and user with a secret kept in
the controller database, so tokens survive a restart): it acts as the job's user, which lets the
task submit sub-jobs and register endpoints. With no tokens configured the API is open.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from iris.rpc.errors import PermissionDenied, Unauthenticated

Role = Literal["admin", "user", "worker"]
_JOB_PREFIX = "iris-job."


@dataclass(frozen=True, slots=True)
class Principal:
    role: Role
    user: str | None = None

    @property
    def is_admin(self) -> bool:
        return self.role == "admin"

    def may_use_jobs(self) -> None:
        if self.role == "worker":
            raise PermissionDenied("a worker token cannot submit or read jobs")

    def may_act_as_worker(self) -> None:
        if self.role not in ("worker", "admin"):
            raise PermissionDenied("only a worker or admin token may register workers")

    def owns(self, job_user: str) -> bool:
        """Admins see everything; users see their own jobs only."""
        return self.is_admin or (self.role == "user" and self.user == job_user)


OPEN = Principal(role="admin", user=None)


@dataclass(frozen=True, slots=True)
class StaticToken:
    token: str
    role: Role
    user: str | None = None


class Authenticator:
    def __init__(self, tokens: Sequence[StaticToken] = (), *, secret: bytes = b"") -> None:
        self._tokens = {t.token: Principal(role=t.role, user=t.user) for t in tokens}
        self._secret = secret

    @property
    def enabled(self) -> bool:
        return bool(self._tokens)

    def authenticate(self, authorization: str | None) -> Principal:
        if not self.enabled:
            return OPEN
        if not authorization or not authorization.lower().startswith("bearer "):
            raise Unauthenticated(
                "this controller needs a token: send 'Authorization: Bearer <token>' (IRIS_TOKEN)"
            )
        token = authorization[7:].strip()
        principal = self._tokens.get(token) or self._job_principal(token)
        if principal is None:
            raise Unauthenticated("the token is not valid for this controller")
        return principal

    def job_token(self, job_id: str, user: str) -> str:
        payload = (
            base64.urlsafe_b64encode(json.dumps({"job": job_id, "user": user}).encode()).decode().rstrip("=")
        )
        return f"{_JOB_PREFIX}{payload}.{self._sign(payload)}"

    def _job_principal(self, token: str) -> Principal | None:
        if not token.startswith(_JOB_PREFIX) or not self._secret:
            return None
        payload, _, signature = token[len(_JOB_PREFIX) :].rpartition(".")
        if not payload or not hmac.compare_digest(signature, self._sign(payload)):
            return None
        try:
            claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
        except ValueError:
            return None
        return Principal(role="user", user=str(claims.get("user")))

    def _sign(self, payload: str) -> str:
        return hmac.new(self._secret, payload.encode(), hashlib.sha256).hexdigest()
