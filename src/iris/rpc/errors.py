"""Error types shared by the API server and its clients.

Every API error travels as ``{"error": {"code": ..., "message": ...}}`` with a matching HTTP status.
"""

from __future__ import annotations

from typing import cast


class IrisError(Exception):
    """Base error: one plain sentence for the user, and the HTTP status it maps to."""

    status_code: int = 500
    code: str = "internal"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class InvalidArgument(IrisError):
    status_code = 400
    code = "invalid_argument"


class Unauthenticated(IrisError):
    status_code = 401
    code = "unauthenticated"


class PermissionDenied(IrisError):
    status_code = 403
    code = "permission_denied"


class NotFound(IrisError):
    status_code = 404
    code = "not_found"


class AlreadyExists(IrisError):
    status_code = 409
    code = "already_exists"


class FailedPrecondition(IrisError):
    status_code = 409
    code = "failed_precondition"


class Unavailable(IrisError):
    status_code = 503
    code = "unavailable"


class InsufficientStorage(IrisError):
    """The server's state disk is full: nothing was written; retry once space is freed."""

    status_code = 507
    code = "insufficient_storage"


class NotImplementedForBackend(IrisError):
    """The operation exists, but not for this controller's backend kind."""

    status_code = 501
    code = "not_implemented_for_backend"


_BY_CODE: dict[str, type[IrisError]] = {
    cls.code: cls
    for cls in (
        InvalidArgument,
        Unauthenticated,
        PermissionDenied,
        NotFound,
        AlreadyExists,
        FailedPrecondition,
        Unavailable,
        InsufficientStorage,
        NotImplementedForBackend,
    )
}


def error_from_body(status_code: int, body: object) -> IrisError:
    """Rebuild the typed error a server sent; fall back on the HTTP status."""
    code, message = "internal", f"server answered HTTP {status_code}"
    if isinstance(body, dict):
        fields = cast("dict[str, object]", body)  # a decoded JSON object
        error = fields.get("error")
        if isinstance(error, dict):
            details = cast("dict[str, object]", error)  # a decoded JSON object
            code = str(details.get("code", code))
            message = str(details.get("message", message))
        elif "detail" in fields:
            message = str(fields["detail"])
    cls = _BY_CODE.get(code)
    if cls is None:
        for candidate in _BY_CODE.values():
            if candidate.status_code == status_code:
                cls = candidate
                break
    err = (cls or IrisError)(message)
    if cls is None:
        err.status_code = status_code
    return err
