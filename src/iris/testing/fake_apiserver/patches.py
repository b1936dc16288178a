"""Patch flavours the API server accepts: JSON merge patch, strategic merge patch, JSON patch.

All functions are pure: they return a new document and never mutate their inputs.
"""

from __future__ import annotations

import copy
from typing import Any

# Lists merged by a key under strategic merge patch (the k8s types' ``patchMergeKey`` tags).
_MERGE_KEYS: dict[str, str] = {
    "containers": "name",
    "initContainers": "name",
    "ephemeralContainers": "name",
    "env": "name",
    "volumes": "name",
    "volumeMounts": "mountPath",
    "conditions": "type",
    "containerStatuses": "name",
    "initContainerStatuses": "name",
    "schedulingGates": "name",
    "imagePullSecrets": "name",
    "ownerReferences": "uid",
    "resourceClaims": "name",
    "hostAliases": "ip",
    "topologySpreadConstraints": "topologyKey",
}
# Lists of scalars merged as sets under strategic merge patch.
_MERGE_PRIMITIVE_LISTS = frozenset({"finalizers"})


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def _merge_key(field: str, items: list[Any]) -> str | None:
    if field == "ports":
        return "containerPort" if any(isinstance(i, dict) and "containerPort" in i for i in items) else "port"
    return _MERGE_KEYS.get(field)


def _merge_keyed_list(current: list[Any], patch: list[Any], key: str) -> list[Any]:
    result = [copy.deepcopy(item) for item in current]
    for item in patch:
        if not isinstance(item, dict):
            continue
        if item.get("$patch") == "delete":
            result = [c for c in result if not (isinstance(c, dict) and c.get(key) == item.get(key))]
            continue
        if item.get("$patch") == "replace":
            return [
                copy.deepcopy({k: v for k, v in i.items() if k != "$patch"})
                for i in patch
                if isinstance(i, dict)
            ]
        for index, existing in enumerate(result):
            if isinstance(existing, dict) and existing.get(key) == item.get(key):
                result[index] = strategic_merge_patch(existing, item)
                break
        else:
            result.append(strategic_merge_patch({}, item))
    return result


def strategic_merge_patch(target: Any, patch: Any) -> Any:
    """Kubernetes strategic merge patch, for the list fields Iris and kubectl touch."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    if patch.get("$patch") == "replace":
        return {k: copy.deepcopy(v) for k, v in patch.items() if k != "$patch"}
    if patch.get("$patch") == "delete":
        return None
    result = dict(target) if isinstance(target, dict) else {}
    retain = patch.get("$retainKeys")
    for key, value in patch.items():
        if key.startswith("$setElementOrder/") or key in ("$retainKeys", "$patch"):
            continue
        if key.startswith("$deleteFromPrimitiveList/"):
            field = key.split("/", 1)[1]
            result[field] = [v for v in result.get(field) or [] if v not in value]
            continue
        if value is None:
            result.pop(key, None)
        elif isinstance(value, list) and key in _MERGE_PRIMITIVE_LISTS:
            merged = list(result.get(key) or [])
            merged += [v for v in value if v not in merged]
            result[key] = merged
        elif isinstance(value, list) and (merge_key := _merge_key(key, value)) is not None:
            result[key] = _merge_keyed_list(result.get(key) or [], value, merge_key)
        else:
            merged_value = strategic_merge_patch(result.get(key), value)
            if merged_value is None:
                result.pop(key, None)
            else:
                result[key] = merged_value
    if isinstance(retain, list):
        result = {k: v for k, v in result.items() if k in retain}
    return result


class JsonPatchError(ValueError):
    pass


def _pointer(path: str) -> list[str]:
    if path == "":
        return []
    if not path.startswith("/"):
        raise JsonPatchError(f"invalid JSON pointer {path!r}")
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]


def _resolve_parent(doc: Any, parts: list[str]) -> Any:
    node = doc
    for part in parts[:-1]:
        if isinstance(node, list):
            node = node[_index(node, part, allow_end=False)]
        elif isinstance(node, dict) and part in node:
            node = node[part]
        else:
            raise JsonPatchError(f"path segment {part!r} not found")
    return node


def _index(node: list[Any], part: str, *, allow_end: bool) -> int:
    if part == "-" and allow_end:
        return len(node)
    if not part.isdigit():
        raise JsonPatchError(f"invalid array index {part!r}")
    index = int(part)
    if index > len(node) or (index == len(node) and not allow_end):
        raise JsonPatchError(f"array index {index} out of range")
    return index


def _get(doc: Any, path: str) -> Any:
    node = doc
    for part in _pointer(path):
        if isinstance(node, list):
            node = node[_index(node, part, allow_end=False)]
        elif isinstance(node, dict) and part in node:
            node = node[part]
        else:
            raise JsonPatchError(f"path {path!r} not found")
    return node


def _remove(doc: Any, path: str) -> Any:
    parts = _pointer(path)
    if not parts:
        raise JsonPatchError("cannot remove the document root")
    parent = _resolve_parent(doc, parts)
    if isinstance(parent, list):
        return parent.pop(_index(parent, parts[-1], allow_end=False))
    if not isinstance(parent, dict) or parts[-1] not in parent:
        raise JsonPatchError(f"path {path!r} not found")
    return parent.pop(parts[-1])


def _add(doc: Any, path: str, value: Any, *, replace: bool) -> Any:
    parts = _pointer(path)
    if not parts:
        return value
    parent = _resolve_parent(doc, parts)
    last = parts[-1]
    if isinstance(parent, list):
        if replace:
            parent[_index(parent, last, allow_end=False)] = value
        else:
            parent.insert(_index(parent, last, allow_end=True), value)
    elif isinstance(parent, dict):
        if replace and last not in parent:
            raise JsonPatchError(f"path {path!r} not found")
        parent[last] = value
    else:
        raise JsonPatchError(f"path {path!r} does not point into an object or array")
    return doc


def json_patch(doc: Any, operations: Any) -> Any:
    """RFC 6902 JSON patch (add, remove, replace, move, copy, test)."""
    if not isinstance(operations, list):
        raise JsonPatchError("a JSON patch must be a list of operations")
    result = copy.deepcopy(doc)
    for op in operations:
        if not isinstance(op, dict) or "op" not in op or "path" not in op:
            raise JsonPatchError(f"invalid operation {op!r}")
        kind, path = op["op"], op["path"]
        if kind in ("add", "replace", "test") and "value" not in op:
            raise JsonPatchError(f"operation {kind} on {path!r} needs a value")
        if kind == "add":
            result = _add(result, path, copy.deepcopy(op["value"]), replace=False)
        elif kind == "replace":
            result = _add(result, path, copy.deepcopy(op["value"]), replace=True)
        elif kind == "remove":
            _remove(result, path)
        elif kind == "move":
            value = _remove(result, op["from"])
            result = _add(result, path, value, replace=False)
        elif kind == "copy":
            result = _add(result, path, copy.deepcopy(_get(result, op["from"])), replace=False)
        elif kind == "test":
            if _get(result, path) != op["value"]:
                raise JsonPatchError(f"test operation on {path!r} failed")
        else:
            raise JsonPatchError(f"unsupported operation {kind!r}")
    return result
