"""Mapping of request paths to resources (pure)."""

from __future__ import annotations

from dataclasses import dataclass

from iris.testing.fake_apiserver.resources import ResourceRegistry, ResourceType

_SUBRESOURCES = frozenset({"status", "log", "exec", "binding", "eviction", "finalize"})


@dataclass(frozen=True)
class ResourceRoute:
    resource: ResourceType
    namespace: str | None
    name: str | None
    subresource: str | None
    legacy_watch: bool = False


def route_resource(path: str, registry: ResourceRegistry) -> ResourceRoute | None:
    """``/api/v1/namespaces/ns/pods/p/log`` -> ResourceRoute(pods, "ns", "p", "log"); None if unknown."""
    parts = [p for p in path.split("/") if p]
    if len(parts) >= 2 and parts[0] == "api":
        group, version, rest = "", parts[1], parts[2:]
    elif len(parts) >= 3 and parts[0] == "apis":
        group, version, rest = parts[1], parts[2], parts[3:]
    else:
        return None
    legacy_watch = bool(rest) and rest[0] == "watch"
    if legacy_watch:
        rest = rest[1:]
    namespace: str | None = None
    if len(rest) >= 3 and rest[0] == "namespaces":
        candidate = registry.lookup(group, version, rest[2])
        if candidate is not None and candidate.namespaced:
            namespace, rest = rest[1], rest[2:]
    if not rest or len(rest) > 3:
        return None
    resource = registry.lookup(group, version, rest[0])
    if resource is None:
        return None
    name = rest[1] if len(rest) >= 2 else None
    subresource = rest[2] if len(rest) == 3 else None
    if subresource is not None and subresource not in _SUBRESOURCES:
        return None
    if namespace is None and resource.namespaced and name is not None:
        return None  # a namespaced object must be addressed inside its namespace
    return ResourceRoute(resource, namespace, name, subresource, legacy_watch)
