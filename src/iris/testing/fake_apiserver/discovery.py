"""Discovery documents (/api, /apis, /apis/<group>/<version>, /version) and minimal OpenAPI."""

from __future__ import annotations

from typing import Any

from iris.testing.fake_apiserver.resources import PODS, ResourceRegistry, ResourceType

_VERBS = ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]
KUBERNETES_VERSION = {
    "major": "1",
    "minor": "32",
    "gitVersion": "v1.32.0-iris-fake",
    "gitCommit": "0" * 40,
    "gitTreeState": "clean",
    "buildDate": "2025-01-01T00:00:00Z",
    "goVersion": "go1.23",
    "compiler": "gc",
    "platform": "linux/amd64",
}


def _entries(resource: ResourceType) -> list[dict[str, Any]]:
    main: dict[str, Any] = {
        "name": resource.plural,
        "singularName": resource.singular,
        "namespaced": resource.namespaced,
        "kind": resource.kind,
        "verbs": _VERBS,
    }
    if resource.short_names:
        main["shortNames"] = list(resource.short_names)
    if resource.categories:
        main["categories"] = list(resource.categories)
    entries = [main]
    if resource.has_status:
        entries.append(
            {
                "name": f"{resource.plural}/status",
                "singularName": "",
                "namespaced": resource.namespaced,
                "kind": resource.kind,
                "verbs": ["get", "patch", "update"],
            }
        )
    if resource == PODS:
        entries.append(
            {"name": "pods/log", "singularName": "", "namespaced": True, "kind": "Pod", "verbs": ["get"]}
        )
        entries.append(
            {
                "name": "pods/binding",
                "singularName": "",
                "namespaced": True,
                "group": "",
                "version": "v1",
                "kind": "Binding",
                "verbs": ["create"],
            }
        )
    return entries


def resource_list(registry: ResourceRegistry, group: str, version: str) -> dict[str, Any] | None:
    resources = registry.in_group_version(group, version)
    if not resources:
        return None
    group_version = f"{group}/{version}" if group else version
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": group_version,
        "resources": [entry for r in resources for entry in _entries(r)],
    }


def core_versions() -> dict[str, Any]:
    return {
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": "127.0.0.1:443"}],
    }


def _group(name: str, versions: list[str]) -> dict[str, Any]:
    entries = [{"groupVersion": f"{name}/{v}", "version": v} for v in versions]
    return {
        "kind": "APIGroup",
        "apiVersion": "v1",
        "name": name,
        "versions": entries,
        "preferredVersion": entries[0],
    }


def group_list(registry: ResourceRegistry) -> dict[str, Any]:
    groups = [_group(name, versions) for name, versions in sorted(registry.group_versions().items()) if name]
    return {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}


def group(registry: ResourceRegistry, name: str) -> dict[str, Any] | None:
    versions = registry.group_versions().get(name)
    return _group(name, versions) if versions and name else None


def openapi_v3_root(registry: ResourceRegistry) -> dict[str, Any]:
    paths = {}
    for name, versions in registry.group_versions().items():
        for version in versions:
            path = f"api/{version}" if not name else f"apis/{name}/{version}"
            paths[path] = {"serverRelativeURL": f"/openapi/v3/{path}?hash=0"}
    return {"paths": paths}


def openapi_v3_document(registry: ResourceRegistry, path: str) -> dict[str, Any] | None:
    """A schema-less OpenAPI v3 document for one group-version.

    It only declares, per kind, a PATCH operation accepting ``fieldValidation``: that is what
    kubectl checks to validate on the server instead of downloading full schemas.
    """
    parts = path.split("/")
    if parts[0] == "api" and len(parts) == 2:
        group, version = "", parts[1]
    elif parts[0] == "apis" and len(parts) == 3:
        group, version = parts[1], parts[2]
    else:
        return None
    resources = registry.in_group_version(group, version)
    if not resources:
        return None
    prefix = f"/{path}"
    paths: dict[str, Any] = {}
    for resource in resources:
        item = (
            f"{prefix}/namespaces/{{namespace}}/{resource.plural}/{{name}}"
            if resource.namespaced
            else f"{prefix}/{resource.plural}/{{name}}"
        )
        paths[item] = {
            "patch": {
                "x-kubernetes-group-version-kind": {
                    "group": group,
                    "version": version,
                    "kind": resource.kind,
                },
                "parameters": [
                    {
                        "name": "fieldValidation",
                        "in": "query",
                        "schema": {"type": "string", "uniqueItems": True},
                    },
                    {
                        "name": "fieldManager",
                        "in": "query",
                        "schema": {"type": "string", "uniqueItems": True},
                    },
                    {"name": "dryRun", "in": "query", "schema": {"type": "string", "uniqueItems": True}},
                ],
                "responses": {"200": {"description": "OK"}},
            }
        }
    return {
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": KUBERNETES_VERSION["gitVersion"]},
        "paths": paths,
        "components": {"schemas": {}},
    }
