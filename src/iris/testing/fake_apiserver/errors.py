"""API errors as real Kubernetes ``Status`` objects."""

from __future__ import annotations

from typing import Any

from iris.testing.fake_apiserver.resources import ResourceType


class ApiError(Exception):
    """An error the server answers with a ``Status`` body and the matching HTTP code."""

    def __init__(self, code: int, reason: str, message: str, details: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        self.details = details

    def status(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        }
        if self.details:
            body["details"] = self.details
        return body


def _details(resource: ResourceType, name: str) -> dict[str, Any]:
    details: dict[str, Any] = {"name": name, "kind": resource.plural}
    if resource.group:
        details["group"] = resource.group
    return details


def not_found(resource: ResourceType, name: str) -> ApiError:
    return ApiError(
        404, "NotFound", f'{resource.qualified_plural} "{name}" not found', _details(resource, name)
    )


def already_exists(resource: ResourceType, name: str) -> ApiError:
    return ApiError(
        409, "AlreadyExists", f'{resource.qualified_plural} "{name}" already exists', _details(resource, name)
    )


def conflict(resource: ResourceType, name: str) -> ApiError:
    return ApiError(
        409,
        "Conflict",
        f'Operation cannot be fulfilled on {resource.qualified_plural} "{name}": the object has been modified; '
        "please apply your changes to the latest version and try again",
        _details(resource, name),
    )


def invalid(resource: ResourceType, name: str, causes: list[str]) -> ApiError:
    message = f'{resource.kind} "{name}" is invalid: ' + ", ".join(causes)
    return ApiError(
        422, "Invalid", message, {**_details(resource, name), "causes": [{"message": c} for c in causes]}
    )


def forbidden(resource: ResourceType, name: str, why: str) -> ApiError:
    return ApiError(
        403,
        "Forbidden",
        f'{resource.qualified_plural} "{name}" is forbidden: {why}',
        _details(resource, name),
    )


def bad_request(message: str) -> ApiError:
    return ApiError(400, "BadRequest", message)


def gone(message: str) -> ApiError:
    return ApiError(410, "Expired", message)


def success_status(resource: ResourceType, obj: dict[str, Any]) -> dict[str, Any]:
    """What DELETE answers for a non-pod object that was removed at once."""
    meta = obj.get("metadata") or {}
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Success",
        "details": {**_details(resource, meta.get("name", "")), "uid": meta.get("uid")},
    }
