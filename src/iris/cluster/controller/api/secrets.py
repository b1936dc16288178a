"""Per-user secrets: values go in, never come out (see controller/secrets.py)."""

from __future__ import annotations

import re

from fastapi import APIRouter
from fastapi.responses import Response

from iris.cluster.controller.api.common import who
from iris.cluster.controller.controller import Controller
from iris.rpc.errors import (
    InvalidArgument,
    NotFound,
    PermissionDenied,
)
from iris.rpc.models import (
    SECRET_NAME_PATTERN,
    SecretList,
    SecretValue,
)


def add_routes(router: APIRouter, controller: Controller) -> None:

    # ---- per-user secrets: values go in, never come out (see controller/secrets.py)

    def secret_owner(user: str | None, default_user: str | None = None) -> str:
        """Whose secrets the caller acts on: a user's own always; an admin's ``user`` (or the
        client's login name, ``default_user``, as jobs of an open controller are named)."""
        principal = who()
        principal.may_use_jobs()
        if principal.job_scope is not None:
            raise PermissionDenied("a job token cannot read or change secrets")
        if principal.role == "user":
            assert principal.user is not None
            if user not in (None, principal.user):
                raise PermissionDenied("a user manages their own secrets only")
            return principal.user
        user = user or default_user
        if not user:
            raise InvalidArgument("name the user whose secrets these are (user=...)")
        return user

    def secret_name(name: str) -> str:
        if not re.fullmatch(SECRET_NAME_PATTERN, name):
            raise InvalidArgument(
                f"{name!r} is not a secret name: letters, digits and _, not starting with a digit"
            )
        return name

    @router.put("/api/v1/secrets/{name}", status_code=204)
    def put_secret(name: str, body: SecretValue) -> Response:
        owner = secret_owner(body.user, body.default_user)
        controller.secrets.set(owner, secret_name(name), body.value, controller.clock())
        return Response(status_code=204)

    @router.get("/api/v1/secrets", response_model=SecretList)
    def list_secrets(user: str | None = None) -> SecretList:
        """Names and times of the caller's secrets (an admin: anyone's, or ``user``'s); never values."""
        if who().is_admin and not user:
            return SecretList(secrets=controller.secrets.list(None))
        return SecretList(secrets=controller.secrets.list(secret_owner(user)))

    @router.delete("/api/v1/secrets/{name}", status_code=204)
    def delete_secret(name: str, user: str | None = None, default_user: str | None = None) -> Response:
        owner = secret_owner(user, default_user)
        if not controller.secrets.remove(owner, secret_name(name)):
            raise NotFound(f"{owner} has no secret named {name}")
        return Response(status_code=204)
