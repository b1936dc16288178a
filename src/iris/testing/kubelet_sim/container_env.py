"""A container's environment and argv the way the kubelet builds them (pure, given object lookups).

Covers env values, ``valueFrom`` (fieldRef, resourceFieldRef, configMapKeyRef, secretKeyRef),
``envFrom`` and ``$(VAR)`` expansion in env values, command and args.
"""

from __future__ import annotations

import base64
import math
import re
from collections.abc import Callable, Mapping
from typing import Any

from iris.testing.kubelet_sim.k8s_types import CONFIGMAPS, SECRETS, ResourceType
from iris.testing.kubelet_sim.quantity import parse_quantity

Lookup = Callable[[ResourceType, str, str], dict[str, Any] | None]
# Host variables a pod's process inherits (it runs on this machine, not in an image).
# The host's CA and proxy settings too: what a node's image would carry for reaching an index.
HOST_ENV_PASSTHROUGH = (
    "PATH", "LANG", "LC_ALL", "TZ", "PYTHONPATH", "VIRTUAL_ENV", "TMPDIR",
    "SSL_CERT_FILE", "SSL_CERT_DIR", "HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy",
    "NO_PROXY", "no_proxy",
)  # fmt: skip
_REFERENCE = re.compile(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)")


class ContainerConfigError(Exception):
    """The kubelet's CreateContainerConfigError: a referenced object or key is missing."""


def expand(text: str, env: Mapping[str, str]) -> str:
    """Kubernetes ``$(VAR)`` expansion: defined names are replaced, ``$$`` is a literal ``$``."""

    def substitute(match: re.Match[str]) -> str:
        if match.group(0) == "$$":
            return "$"
        name = match.group(1)
        return env[name] if name in env else match.group(0)

    return _REFERENCE.sub(substitute, text)


def _field_value(pod: dict[str, Any], path: str) -> str:
    meta, spec, status = pod.get("metadata") or {}, pod.get("spec") or {}, pod.get("status") or {}
    if match := re.fullmatch(r"metadata\.(labels|annotations)\['([^']+)'\]", path):
        return str((meta.get(match.group(1)) or {}).get(match.group(2), ""))
    values = {
        "metadata.name": meta.get("name"),
        "metadata.namespace": meta.get("namespace"),
        "metadata.uid": meta.get("uid"),
        "spec.nodeName": spec.get("nodeName"),
        "spec.serviceAccountName": spec.get("serviceAccountName"),
        "status.podIP": status.get("podIP") or "127.0.0.1",
        "status.hostIP": status.get("hostIP") or "127.0.0.1",
        "status.podIPs": status.get("podIP") or "127.0.0.1",
        "status.hostIPs": status.get("hostIP") or "127.0.0.1",
    }
    if path not in values:
        raise ContainerConfigError(f"unsupported fieldRef {path!r}")
    return str(values[path] or "")


def _resource_value(container: dict[str, Any], ref: Mapping[str, Any]) -> str:
    section, _, name = str(ref.get("resource", "")).partition(".")
    resources = container.get("resources") or {}
    raw = (resources.get(section) or {}).get(name)
    if raw is None and section == "requests":
        raw = (resources.get("limits") or {}).get(name)
    if raw is None:
        return "0"
    divisor = parse_quantity(ref.get("divisor") or "1")
    return str(math.ceil(parse_quantity(raw) / divisor))


def _data_of(obj: dict[str, Any], resource: ResourceType) -> dict[str, str]:
    if resource == SECRETS:
        data = {k: base64.b64decode(v).decode(errors="replace") for k, v in (obj.get("data") or {}).items()}
        data.update(obj.get("stringData") or {})
        return data
    return {**(obj.get("binaryData") or {}), **(obj.get("data") or {})}


def _key_ref(ref: Mapping[str, Any], resource: ResourceType, namespace: str, lookup: Lookup) -> str | None:
    name, key, optional = ref.get("name", ""), ref.get("key", ""), bool(ref.get("optional"))
    kind = "configmap" if resource == CONFIGMAPS else "secret"
    obj = lookup(resource, namespace, name)
    if obj is None:
        if optional:
            return None
        raise ContainerConfigError(f'{kind} "{name}" not found')
    data = _data_of(obj, resource)
    if key not in data:
        if optional:
            return None
        raise ContainerConfigError(
            f"couldn't find key {key} in {kind.capitalize() if kind == 'secret' else 'ConfigMap'} {namespace}/{name}"
        )
    return data[key]


def build_environment(
    pod: dict[str, Any], container: dict[str, Any], base: Mapping[str, str], lookup: Lookup
) -> dict[str, str]:
    """``base`` (PATH, HOME, ...) overlaid with envFrom, then env, in order, with expansion."""
    namespace = pod["metadata"].get("namespace", "")
    env = dict(base)
    for source in container.get("envFrom") or []:
        prefix = source.get("prefix", "")
        for field, resource in (("configMapRef", CONFIGMAPS), ("secretRef", SECRETS)):
            ref = source.get(field)
            if not ref:
                continue
            obj = lookup(resource, namespace, ref.get("name", ""))
            if obj is None:
                if ref.get("optional"):
                    continue
                raise ContainerConfigError(
                    f'{"configmap" if resource == CONFIGMAPS else "secret"} "{ref.get("name")}" not found'
                )
            env.update({prefix + k: v for k, v in _data_of(obj, resource).items()})
    for var in container.get("env") or []:
        name = var.get("name", "")
        source = var.get("valueFrom")
        if source is None:
            env[name] = expand(str(var.get("value", "")), env)
        elif "fieldRef" in source:
            env[name] = _field_value(pod, source["fieldRef"].get("fieldPath", ""))
        elif "resourceFieldRef" in source:
            env[name] = _resource_value(container, source["resourceFieldRef"])
        elif "configMapKeyRef" in source:
            if (value := _key_ref(source["configMapKeyRef"], CONFIGMAPS, namespace, lookup)) is not None:
                env[name] = value
        elif "secretKeyRef" in source:
            if (value := _key_ref(source["secretKeyRef"], SECRETS, namespace, lookup)) is not None:
                env[name] = value
    return env


def container_argv(container: dict[str, Any], env: Mapping[str, str]) -> list[str]:
    """command + args with expansion. Without either (an image default we cannot know): sleep forever."""
    argv = [*(container.get("command") or []), *(container.get("args") or [])]
    if not argv:
        return ["sleep", "infinity"]
    return [expand(str(part), env) for part in argv]
