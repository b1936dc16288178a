"""Bearer-token authentication and the rules of who may do what.

Tokens come from the cluster config (``auth.tokens``: admin, user or worker). A running task
gets a *job token* minted by the controller (HMAC over its job id, the job's run uid, user and
expiry with a secret kept by the controller, so tokens survive a restart): it acts as the job's
user on that job and its sub-jobs only (submit sub-jobs, register endpoints, read and stop them),
expires, and stops working once its run has finished or been replaced (``--replace`` starts a new
run of the same job id, with a new run uid). With no tokens configured the API is open.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal, NamedTuple

from iris.rpc.errors import PermissionDenied, Unauthenticated

Role = Literal["admin", "user", "worker"]
_JOB_PREFIX = "iris-job."
# A job token is minted per attempt; the job's end revokes it long before this.
JOB_TOKEN_TTL_S = 7 * 24 * 3600.0


@dataclass(frozen=True, slots=True)
class Principal:
    role: Role
    user: str | None = None
    # A job token: only this job and its sub-jobs.
    job_scope: str | None = None

    @property
    def is_admin(self) -> bool:
        return self.role == "admin"

    def may_use_jobs(self) -> None:
        if self.role == "worker":
            raise PermissionDenied("a worker token cannot submit or read jobs")

    def may_act_as_worker(self) -> None:
        if self.role not in ("worker", "admin"):
            raise PermissionDenied("only a worker or admin token may register workers")

    def owns(self, job_user: str, job_id: str | None = None) -> bool:
        """Admins see everything; users see their own jobs only; a job token its own job tree only."""
        if self.is_admin:
            return True
        if self.role != "user" or self.user != job_user:
            return False
        return self.job_scope is None or (job_id is not None and self.in_scope(job_id))

    def in_scope(self, job_id: str) -> bool:
        scope = self.job_scope
        return scope is None or job_id == scope or job_id.startswith(scope + "/")


OPEN = Principal(role="admin", user=None)


class JobRun(NamedTuple):
    """What a job token is checked against: the job's current run and whether it has finished."""

    run_uid: str
    finished: bool


@dataclass(frozen=True, slots=True)
class StaticToken:
    token: str
    role: Role
    user: str | None = None


class Authenticator:
    def __init__(
        self,
        tokens: Sequence[StaticToken] = (),
        *,
        secret: bytes = b"",
        job_run: Callable[[str], JobRun | None] | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        """``job_run(job_id)``: the job's current run (None once the job is gone); a job token
        works only for the run it names, and only until that run has finished."""
        self._tokens = {t.token: Principal(role=t.role, user=t.user) for t in tokens}
        self._secret = secret
        self.job_run = job_run
        self._clock = clock

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

    def job_token(self, job_id: str, user: str, run_uid: str, ttl_s: float = JOB_TOKEN_TTL_S) -> str:
        claims = {"job": job_id, "run": run_uid, "user": user, "exp": round(self._clock() + ttl_s)}
        payload = base64.urlsafe_b64encode(json.dumps(claims).encode()).decode().rstrip("=")
        return f"{_JOB_PREFIX}{payload}.{self._sign(payload)}"

    def _job_principal(self, token: str) -> Principal | None:
        if not token.startswith(_JOB_PREFIX) or not self._secret:
            return None
        payload, _, signature = token[len(_JOB_PREFIX) :].rpartition(".")
        if not payload or not hmac.compare_digest(signature, self._sign(payload)):
            return None
        try:
            claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
            job, user, expires = str(claims["job"]), str(claims["user"]), float(claims["exp"])
            run = str(claims.get("run", ""))
        except (ValueError, KeyError, TypeError, AttributeError):
            return None
        if not expires > self._clock():
            raise Unauthenticated("the job token has expired")
        if self.job_run is not None:
            current = self.job_run(job)
            if current is None:
                raise Unauthenticated(f"the job token of {job} stopped working: the job no longer exists")
            if not hmac.compare_digest(current.run_uid, run):
                raise Unauthenticated(
                    f"the job token of {job} stopped working: it belongs to an earlier run of the job"
                )
            if current.finished:
                raise Unauthenticated(f"the job token of {job} stopped working: the job has finished")
        return Principal(role="user", user=user, job_scope=job)

    def _sign(self, payload: str) -> str:
        return hmac.new(self._secret, payload.encode(), hashlib.sha256).hexdigest()
