"""Object validation the way the API server does it; each check returns human-readable causes."""

from __future__ import annotations

import re
from typing import Any

from iris.testing.fake_apiserver.resources import NAMESPACES, PODS, PRIORITY_CLASSES, SERVICES, ResourceType
from iris.testing.fake_apiserver.selectors import LABEL_KEY_RE, LABEL_VALUE_RE
from iris.testing.k8s_quantity import parse_quantity

_DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_SUBDOMAIN_HELP = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', "
    "and must start and end with an alphanumeric character"
)
_LABEL_HELP = (
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', "
    "and must start and end with an alphanumeric character"
)
_RESTART_POLICIES = ("Always", "OnFailure", "Never")
# Pod spec fields that may change after creation (everything else is immutable).
_MUTABLE_POD_SPEC_FIELDS = ("activeDeadlineSeconds", "tolerations", "schedulingGates")


def _is_str_map(value: Any) -> bool:
    return isinstance(value, dict) and all(isinstance(v, str) for v in value.values())


def _is_list_of(value: Any, kind: type) -> bool:
    return isinstance(value, list) and all(isinstance(item, kind) for item in value)


def _container_shape(where: str, container: dict[str, Any]) -> list[str]:
    causes = []
    for field in ("name", "image", "workingDir", "imagePullPolicy", "restartPolicy"):
        if container.get(field) is not None and not isinstance(container[field], str):
            causes.append(f"{where}.{field}: Invalid value: must be a string")
    for field in ("command", "args"):
        if container.get(field) is not None and not _is_list_of(container[field], str):
            causes.append(f"{where}.{field}: Invalid value: must be a list of strings")
    for field in ("env", "envFrom", "ports", "volumeMounts"):
        if container.get(field) is not None and not _is_list_of(container[field], dict):
            causes.append(f"{where}.{field}: Invalid value: must be a list of objects")
    resources = container.get("resources")
    if resources is not None:
        sections = (
            [resources.get(k) for k in ("requests", "limits")] if isinstance(resources, dict) else [None]
        )
        if not isinstance(resources, dict) or not all(
            s is None
            or (
                isinstance(s, dict)
                and all(isinstance(v, str | int | float) and not isinstance(v, bool) for v in s.values())
            )
            for s in sections
        ):
            causes.append(
                f"{where}.resources: Invalid value: requests and limits must map names to quantities"
            )
    return causes


def _pod_spec_shape(spec: Any) -> list[str]:
    if not isinstance(spec, dict):
        return ["spec: Required value: must be an object"]
    causes = []
    for field in ("containers", "initContainers", "schedulingGates", "tolerations", "volumes"):
        if spec.get(field) is not None and not _is_list_of(spec[field], dict):
            causes.append(f"spec.{field}: Invalid value: must be a list of objects")
    for field in ("containers", "initContainers"):
        if _is_list_of(spec.get(field), dict):
            for index, container in enumerate(spec[field]):
                causes += _container_shape(f"spec.{field}[{index}]", container)
    for index, gate in enumerate(
        spec.get("schedulingGates") or [] if _is_list_of(spec.get("schedulingGates"), dict) else []
    ):
        if not isinstance(gate.get("name"), str):
            causes.append(f"spec.schedulingGates[{index}].name: Required value")
    for field in ("restartPolicy", "priorityClassName", "nodeName", "schedulerName", "serviceAccountName"):
        if spec.get(field) is not None and not isinstance(spec[field], str):
            causes.append(f"spec.{field}: Invalid value: must be a string")
    for field in ("priority", "terminationGracePeriodSeconds", "activeDeadlineSeconds"):
        if spec.get(field) is not None and (
            not isinstance(spec[field], int) or isinstance(spec[field], bool)
        ):
            causes.append(f"spec.{field}: Invalid value: must be an integer")
    if spec.get("nodeSelector") is not None and not _is_str_map(spec["nodeSelector"]):
        causes.append("spec.nodeSelector: Invalid value: must be a map of strings")
    if spec.get("affinity") is not None and not isinstance(spec["affinity"], dict):
        causes.append("spec.affinity: Invalid value: must be an object")
    return causes


def shape_errors(resource: ResourceType, obj: Any) -> list[str]:
    """Type errors, caught before defaulting and validation look inside the object."""
    if not isinstance(obj, dict):
        return ["the object must be a JSON object"]
    causes = []
    meta = obj.get("metadata")
    if meta is not None and not isinstance(meta, dict):
        causes.append("metadata: Invalid value: must be an object")
    elif isinstance(meta, dict):
        for field in ("name", "generateName", "namespace", "resourceVersion", "uid"):
            if meta.get(field) is not None and not isinstance(meta[field], str):
                causes.append(f"metadata.{field}: Invalid value: must be a string")
        for field in ("labels", "annotations"):
            if meta.get(field) is not None and not _is_str_map(meta[field]):
                causes.append(f"metadata.{field}: Invalid value: must be a map of strings")
        if meta.get("finalizers") is not None and not _is_list_of(meta["finalizers"], str):
            causes.append("metadata.finalizers: Invalid value: must be a list of strings")
        if meta.get("ownerReferences") is not None and not _is_list_of(meta["ownerReferences"], dict):
            causes.append("metadata.ownerReferences: Invalid value: must be a list of objects")
    if resource.has_status and obj.get("status") is not None and not isinstance(obj["status"], dict):
        causes.append("status: Invalid value: must be an object")
    if resource == PODS:
        causes += _pod_spec_shape(obj.get("spec"))
    if (
        resource == PRIORITY_CLASSES
        and obj.get("value") is not None
        and (not isinstance(obj["value"], int) or isinstance(obj["value"], bool))
    ):
        causes.append("value: Invalid value: must be an integer")
    return causes


def object_name(obj: Any) -> str:
    meta = obj.get("metadata") if isinstance(obj, dict) else None
    name = meta.get("name") if isinstance(meta, dict) else None
    return name if isinstance(name, str) else ""


def is_dns1123_label(name: str) -> bool:
    return len(name) <= 63 and bool(_DNS1123_LABEL.match(name))


def validate_name(resource: ResourceType, name: str) -> list[str]:
    if resource in (NAMESPACES, SERVICES):
        if not is_dns1123_label(name):
            return [f'metadata.name: Invalid value: "{name}": {_LABEL_HELP} (at most 63 characters)']
        return []
    if len(name) > 253 or not _DNS1123_SUBDOMAIN.match(name):
        return [f'metadata.name: Invalid value: "{name}": {_SUBDOMAIN_HELP} (at most 253 characters)']
    return []


def _validate_labels(labels: Any) -> list[str]:
    if labels is None:
        return []
    if not isinstance(labels, dict):
        return ["metadata.labels: Invalid value: must be a map of strings"]
    causes: list[str] = []
    for key, value in labels.items():
        if not isinstance(key, str) or not LABEL_KEY_RE.match(key) or len(key.split("/")[-1]) > 63:
            causes.append(
                f'metadata.labels: Invalid value: "{key}": name part must be 63 characters or less, alphanumeric, "-", "_" or "."'
            )
        if not isinstance(value, str) or len(value) > 63 or not LABEL_VALUE_RE.match(value):
            causes.append(
                f'metadata.labels: Invalid value: "{value}": a valid label must be an empty string or consist of '
                "alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character "
                "(at most 63 characters)"
            )
    return causes


def _validate_annotations(annotations: Any) -> list[str]:
    if annotations is None:
        return []
    if not isinstance(annotations, dict):
        return ["metadata.annotations: Invalid value: must be a map of strings"]
    causes: list[str] = []
    for key, value in annotations.items():
        if not isinstance(key, str) or not LABEL_KEY_RE.match(key):
            causes.append(f'metadata.annotations: Invalid value: "{key}": not a valid annotation key')
        if not isinstance(value, str):
            causes.append(f"metadata.annotations[{key}]: Invalid value: must be a string")
    return causes


def _validate_resources(path: str, resources: Any) -> list[str]:
    if not resources:
        return []
    causes: list[str] = []
    parsed: dict[str, dict[str, Any]] = {}
    for section in ("requests", "limits"):
        for name, amount in ((resources or {}).get(section) or {}).items():
            try:
                parsed.setdefault(section, {})[name] = parse_quantity(amount)
            except ValueError as exc:
                causes.append(f"{path}.resources.{section}[{name}]: Invalid value: {exc}")
    for name, request in parsed.get("requests", {}).items():
        limit = parsed.get("limits", {}).get(name)
        if limit is not None and request > limit:
            causes.append(
                f"{path}.resources.requests: Invalid value: must be less than or equal to {name} limit"
            )
    return causes


def _validate_containers(path: str, containers: Any, *, required: bool) -> list[str]:
    if not containers:
        return [f"{path}: Required value"] if required else []
    causes: list[str] = []
    seen: set[str] = set()
    for index, container in enumerate(containers):
        where = f"{path}[{index}]"
        name = container.get("name") or ""
        if not name:
            causes.append(f"{where}.name: Required value")
        elif not is_dns1123_label(name):
            causes.append(f'{where}.name: Invalid value: "{name}": {_LABEL_HELP}')
        elif name in seen:
            causes.append(f'{where}.name: Duplicate value: "{name}"')
        seen.add(name)
        if not container.get("image"):
            causes.append(f"{where}.image: Required value")
        causes += _validate_resources(where, container.get("resources"))
    return causes


def validate_pod_spec(spec: Any) -> list[str]:
    if not isinstance(spec, dict):
        return ["spec: Required value"]
    causes = _validate_containers("spec.containers", spec.get("containers"), required=True)
    causes += _validate_containers("spec.initContainers", spec.get("initContainers"), required=False)
    if spec.get("restartPolicy") not in _RESTART_POLICIES:
        causes.append(f'spec.restartPolicy: Unsupported value: "{spec.get("restartPolicy")}"')
    for index, gate in enumerate(spec.get("schedulingGates") or []):
        if not LABEL_KEY_RE.match(str(gate.get("name", ""))):
            causes.append(f"spec.schedulingGates[{index}].name: Invalid value: not a qualified name")
    return causes


def validate_object(resource: ResourceType, obj: dict[str, Any]) -> list[str]:
    """Checks applied on create and update."""
    meta = obj.get("metadata") or {}
    causes = validate_name(resource, meta.get("name", ""))
    causes += _validate_labels(meta.get("labels"))
    causes += _validate_annotations(meta.get("annotations"))
    if resource == PODS:
        causes += validate_pod_spec(obj.get("spec"))
    if resource == PRIORITY_CLASSES and not isinstance(obj.get("value"), int):
        causes.append("value: Required value")
    return causes


def validate_pod_create(pod: dict[str, Any]) -> list[str]:
    spec = pod.get("spec") or {}
    if spec.get("nodeName") and spec.get("schedulingGates"):
        return ["spec.nodeName: Forbidden: cannot be set until all schedulingGates have been cleared"]
    return []


def _without_images(containers: list[dict[str, Any]] | None) -> list[dict[str, Any]]:
    return [{k: v for k, v in c.items() if k != "image"} for c in containers or []]


def validate_update(resource: ResourceType, old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """Immutability rules between two versions of an object."""
    causes: list[str] = []
    old_meta, new_meta = old.get("metadata") or {}, new.get("metadata") or {}
    if old_meta.get("deletionTimestamp"):
        added = set(new_meta.get("finalizers") or []) - set(old_meta.get("finalizers") or [])
        if added:
            causes.append(
                f"metadata.finalizers: Forbidden: no new finalizers can be added if the object is being deleted, found new finalizers {sorted(added)}"
            )
    if resource == PODS:
        old_spec, new_spec = old.get("spec") or {}, new.get("spec") or {}
        old_gates = [g.get("name") for g in old_spec.get("schedulingGates") or []]
        new_gates = [g.get("name") for g in new_spec.get("schedulingGates") or []]
        if any(g not in old_gates for g in new_gates):
            causes.append(
                "spec.schedulingGates: Forbidden: only deletion is allowed, but found new scheduling gate"
            )
        mutable = _MUTABLE_POD_SPEC_FIELDS
        if old_gates:  # while gated, scheduling directives may be added (how Kueue injects flavors)
            mutable += ("nodeSelector", "affinity")
            old_selector, new_selector = (
                old_spec.get("nodeSelector") or {},
                new_spec.get("nodeSelector") or {},
            )
            if any(new_selector.get(k) != v for k, v in old_selector.items()):
                causes.append(
                    "spec.nodeSelector: Invalid value: only additions to spec.nodeSelector are allowed"
                )
        frozen_old = {k: v for k, v in old_spec.items() if k not in mutable}
        frozen_new = {k: v for k, v in new_spec.items() if k not in mutable}
        for field in ("containers", "initContainers"):
            frozen_old[field] = _without_images(frozen_old.get(field))
            frozen_new[field] = _without_images(frozen_new.get(field))
        if frozen_old != frozen_new:
            changed = sorted(
                k for k in set(frozen_old) | set(frozen_new) if frozen_old.get(k) != frozen_new.get(k)
            )
            causes.append(
                "spec: Forbidden: pod updates may not change fields other than `spec.containers[*].image`, "
                "`spec.initContainers[*].image`, `spec.activeDeadlineSeconds`, `spec.tolerations` (only additions "
                f"to existing tolerations), `spec.schedulingGates` (only removals) (changed: {', '.join(changed)})"
            )
    if resource == PRIORITY_CLASSES:
        for field in ("value", "preemptionPolicy"):
            if old.get(field) != new.get(field):
                causes.append(f"{field}: Forbidden: may not be changed in an update.")
    return causes
