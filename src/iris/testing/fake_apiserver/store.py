"""The object store behind the fake API server.

One global, monotonically increasing resourceVersion; objects are never mutated in place (every
write stores a new dict), so snapshots handed to watchers and serializers stay valid without
copying. A bounded history of events serves watch resumption; older versions answer 410 Gone.
"""

from __future__ import annotations

import base64
import bisect
import collections
import copy
import datetime as dt
import json
import random
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from iris.testing.fake_apiserver import errors
from iris.testing.fake_apiserver.defaults import default_pod
from iris.testing.fake_apiserver.errors import ApiError
from iris.testing.fake_apiserver.patches import JsonPatchError, json_patch, merge_patch, strategic_merge_patch
from iris.testing.fake_apiserver.resources import (
    NAMESPACES,
    PODS,
    PRIORITY_CLASSES,
    ResourceRegistry,
    ResourceType,
)
from iris.testing.fake_apiserver.selectors import (
    fields_match,
    labels_match,
    parse_field_selector,
    parse_label_selector,
)
from iris.testing.fake_apiserver.subscriptions import Subscription, WatchEvent
from iris.testing.fake_apiserver.validation import (
    object_name,
    shape_errors,
    validate_object,
    validate_pod_create,
    validate_update,
)

AdmissionHook = Callable[[ResourceType, dict[str, Any]], None]
"""Called on every create with the defaulted object, which it may mutate; raise ApiError to reject."""

PATCH_MERGE = "application/merge-patch+json"
PATCH_STRATEGIC = "application/strategic-merge-patch+json"
PATCH_JSON = "application/json-patch+json"
PATCH_APPLY = "application/apply-patch+yaml"
_NAME_SUFFIX_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"
_TERMINAL_PHASES = ("Succeeded", "Failed")


def utc_timestamp(offset_seconds: float = 0) -> str:
    moment = dt.datetime.now(dt.UTC) + dt.timedelta(seconds=offset_seconds)
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(frozen=True)
class ListResult:
    items: list[dict[str, Any]]
    resource_version: str
    continue_token: str | None
    remaining_item_count: int | None


def _meta(obj: dict[str, Any]) -> dict[str, Any]:
    if obj.get("metadata") is None:
        obj["metadata"] = {}
    return obj["metadata"]


def _encode_continue(resource_version: int, last: tuple[str, str]) -> str:
    raw = json.dumps({"rv": resource_version, "start": list(last)}).encode()
    return base64.urlsafe_b64encode(raw).decode()


def _decode_continue(token: str) -> tuple[int, tuple[str, str]]:
    try:
        data = json.loads(base64.urlsafe_b64decode(token.encode()))
        return int(data["rv"]), (str(data["start"][0]), str(data["start"][1]))
    except (ValueError, KeyError, IndexError, TypeError):
        raise errors.bad_request(f"continue key is not valid: {token!r}") from None


class ObjectStore:
    """Thread-safe store of API objects with Kubernetes write semantics."""

    def __init__(
        self, registry: ResourceRegistry, *, history_size: int = 10_000, initial_resource_version: int = 1000
    ) -> None:
        self.registry = registry
        self.lock = threading.RLock()
        self._rv = initial_resource_version
        self._objects: dict[str, dict[tuple[str, str], dict[str, Any]]] = collections.defaultdict(dict)
        self._history: collections.deque[WatchEvent] = collections.deque(maxlen=history_size)
        self._compacted_rv = initial_resource_version
        self._subscribers: dict[str, set[Subscription]] = collections.defaultdict(set)
        self._admission_hooks: list[AdmissionHook] = []

    # ----- hooks and subscriptions -------------------------------------------------------------

    def add_admission_hook(self, hook: AdmissionHook) -> None:
        with self.lock:
            self._admission_hooks.append(hook)

    def remove_admission_hook(self, hook: AdmissionHook) -> None:
        with self.lock:
            self._admission_hooks.remove(hook)

    @property
    def resource_version(self) -> int:
        with self.lock:
            return self._rv

    def subscribe(
        self,
        resource: ResourceType,
        namespace: str | None = None,
        *,
        resource_version: str | None = None,
        max_backlog: int | None = None,
        wakeup: threading.Event | None = None,
    ) -> Subscription:
        """Start a change feed, the way a watch does.

        ``resource_version`` None/""/"0": first a synthetic ADDED per existing object, then live
        changes. A number: replay history after it (410 Gone if it is older than the history).
        """
        subscription = Subscription(resource, namespace, max_backlog, self._unsubscribe, wakeup)
        with self.lock:
            if resource_version in (None, "", "0"):
                existing = sorted(
                    self._objects[resource.key].values(), key=lambda o: int(o["metadata"]["resourceVersion"])
                )
                for obj in existing:
                    event = WatchEvent("ADDED", resource, obj, None, int(obj["metadata"]["resourceVersion"]))
                    if subscription.accepts(event):
                        subscription.push(event)
            else:
                try:
                    since = int(resource_version)
                except ValueError:
                    raise errors.bad_request(f"invalid resource version {resource_version!r}") from None
                if since < self._compacted_rv:
                    raise errors.gone(f"too old resource version: {since} ({self._compacted_rv})")
                start = bisect.bisect_right([e.resource_version for e in self._history], since)
                for event in list(self._history)[start:]:
                    if event.resource.key == resource.key and subscription.accepts(event):
                        subscription.push(event)
            self._subscribers[resource.key].add(subscription)
        return subscription

    def quiescent_resource_version(self, subscription: Subscription) -> int | None:
        """The current resourceVersion if ``subscription`` has nothing queued (a safe bookmark), else None."""
        with self.lock:
            return None if subscription.backlog else self._rv

    def _unsubscribe(self, subscription: Subscription) -> None:
        with self.lock:
            self._subscribers[subscription.resource.key].discard(subscription)

    def close_all_subscriptions(self) -> None:
        with self.lock:
            subscriptions = [s for subs in self._subscribers.values() for s in subs]
        for subscription in subscriptions:
            subscription.close()

    def _emit(
        self, event_type: str, resource: ResourceType, obj: dict[str, Any], previous: dict[str, Any] | None
    ) -> None:
        event = WatchEvent(event_type, resource, obj, previous, int(obj["metadata"]["resourceVersion"]))
        if len(self._history) == self._history.maxlen:
            self._compacted_rv = self._history[0].resource_version
        self._history.append(event)
        for subscription in list(self._subscribers[resource.key]):
            if subscription.accepts(event):
                subscription.push(event)

    def _next_rv(self) -> str:
        self._rv += 1
        return str(self._rv)

    # ----- reads --------------------------------------------------------------------------------

    def _key(self, resource: ResourceType, namespace: str | None, name: str) -> tuple[str, str]:
        return ((namespace or "") if resource.namespaced else "", name)

    def get(
        self, resource: ResourceType, namespace: str | None, name: str, *, copy_result: bool = True
    ) -> dict[str, Any]:
        with self.lock:
            obj = self._objects[resource.key].get(self._key(resource, namespace, name))
        if obj is None:
            raise errors.not_found(resource, name)
        return copy.deepcopy(obj) if copy_result else obj

    def exists(self, resource: ResourceType, namespace: str | None, name: str) -> bool:
        with self.lock:
            return self._key(resource, namespace, name) in self._objects[resource.key]

    def try_get(self, resource: ResourceType, namespace: str | None, name: str) -> dict[str, Any] | None:
        try:
            return self.get(resource, namespace, name)
        except ApiError:
            return None

    def list(
        self,
        resource: ResourceType,
        namespace: str | None = None,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
        limit: int | None = None,
        continue_token: str | None = None,
        copy_result: bool = True,
    ) -> ListResult:
        label_reqs = self.parse_label_requirements(label_selector)
        field_reqs = self.parse_field_requirements(resource, field_selector)
        start: tuple[str, str] | None = None
        if continue_token:
            token_rv, start = _decode_continue(continue_token)
            if token_rv < self._compacted_rv:
                raise errors.gone(
                    "The provided continue parameter is too old to display a consistent list result."
                )
        with self.lock:
            rv = self._rv
            entries = sorted(self._objects[resource.key].items())
        selected: list[tuple[tuple[str, str], dict[str, Any]]] = []
        for key, obj in entries:
            if namespace and resource.namespaced and key[0] != namespace:
                continue
            if start is not None and key <= start:
                continue
            if label_reqs and not labels_match(label_reqs, obj["metadata"].get("labels")):
                continue
            if field_reqs and not fields_match(field_reqs, obj):
                continue
            selected.append((key, obj))
        next_token = None
        remaining = None
        if limit and limit > 0 and len(selected) > limit:
            remaining = len(selected) - limit
            selected = selected[:limit]
            next_token = _encode_continue(rv, selected[-1][0])
        items = [copy.deepcopy(obj) if copy_result else obj for _, obj in selected]
        return ListResult(items, str(rv), next_token, remaining)

    @staticmethod
    def parse_label_requirements(selector: str | None) -> tuple:
        try:
            return parse_label_selector(selector)
        except ValueError as exc:
            raise errors.bad_request(f"unable to parse requirement: {exc}") from None

    @staticmethod
    def parse_field_requirements(resource: ResourceType, selector: str | None) -> tuple:
        try:
            requirements = parse_field_selector(selector)
        except ValueError as exc:
            raise errors.bad_request(str(exc)) from None
        for requirement in requirements:
            if requirement.field not in resource.supported_field_labels:
                raise errors.bad_request(f"field label not supported: {requirement.field}")
        return requirements

    # ----- create -------------------------------------------------------------------------------

    def create(
        self, resource: ResourceType, namespace: str | None, body: dict[str, Any], *, dry_run: bool = False
    ) -> dict[str, Any]:
        obj = copy.deepcopy(body) if isinstance(body, dict) else None
        if obj is None:
            raise errors.bad_request("the request body must be a JSON object")
        if causes := shape_errors(resource, obj):
            raise errors.invalid(resource, object_name(obj), causes)
        self._check_type(resource, obj)
        meta = _meta(obj)
        if resource.namespaced:
            body_ns = meta.get("namespace")
            if namespace and body_ns and body_ns != namespace:
                raise errors.bad_request(
                    "the namespace of the provided object does not match the namespace sent on the request"
                )
            namespace = namespace or body_ns
            if not namespace:
                raise errors.bad_request("the namespace of the object must be set")
            meta["namespace"] = namespace
        else:
            meta.pop("namespace", None)
        for field in (
            "uid",
            "resourceVersion",
            "creationTimestamp",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
            "generation",
            "managedFields",
        ):
            meta.pop(field, None)
        generated = not meta.get("name")
        if generated and not meta.get("generateName"):
            raise errors.invalid(
                resource, "", ["metadata.name: Required value: name or generateName is required"]
            )
        with self.lock:
            if resource.namespaced:
                self._check_namespace_open(
                    resource, namespace or "", meta.get("name") or meta.get("generateName", "")
                )
            if resource == PODS:
                default_pod(obj)
                self._admit_pod_priority(obj)
            for hook in list(self._admission_hooks):
                hook(resource, obj)
            for _ in range(10):
                if generated:
                    suffix = "".join(random.choice(_NAME_SUFFIX_ALPHABET) for _ in range(5))
                    meta["name"] = meta["generateName"][:58] + suffix
                key = self._key(resource, namespace, meta["name"])
                if key not in self._objects[resource.key]:
                    break
                if not generated:
                    raise errors.already_exists(resource, meta["name"])
            else:
                raise errors.already_exists(resource, meta["name"])
            causes = validate_object(resource, obj) + (validate_pod_create(obj) if resource == PODS else [])
            if causes:
                raise errors.invalid(resource, meta["name"], causes)
            meta["uid"] = str(uuid.uuid4())
            meta["creationTimestamp"] = utc_timestamp()
            meta["generation"] = 1
            if resource == NAMESPACES:
                obj["status"] = {"phase": "Active"}
            if dry_run:
                meta["resourceVersion"] = str(self._rv)
                return obj
            meta["resourceVersion"] = self._next_rv()
            self._objects[resource.key][key] = obj
            self._emit("ADDED", resource, obj, None)
            return copy.deepcopy(obj)

    def _check_type(self, resource: ResourceType, obj: dict[str, Any]) -> None:
        kind, api_version = obj.get("kind"), obj.get("apiVersion")
        if kind and kind != resource.kind:
            raise errors.bad_request(
                f"the kind {kind!r} of the object does not match the resource {resource.plural!r} ({resource.kind})"
            )
        if api_version and api_version != resource.api_version:
            raise errors.bad_request(
                f"the apiVersion {api_version!r} of the object does not match {resource.api_version!r}"
            )
        obj["kind"] = resource.kind
        obj["apiVersion"] = resource.api_version

    def _check_namespace_open(self, resource: ResourceType, namespace: str, name: str) -> None:
        ns_obj = self._objects[NAMESPACES.key].get(("", namespace))
        if ns_obj is None:
            raise ApiError(
                404,
                "NotFound",
                f'namespaces "{namespace}" not found',
                {"name": namespace, "kind": "namespaces"},
            )
        if ns_obj["metadata"].get("deletionTimestamp"):
            raise errors.forbidden(
                resource,
                name,
                f"unable to create new content in namespace {namespace} because it is being terminated",
            )

    def _admit_pod_priority(self, pod: dict[str, Any]) -> None:
        """The Priority admission plugin: resolve priorityClassName into spec.priority."""
        spec = pod["spec"]
        name = spec.get("priorityClassName")
        classes = self._objects[PRIORITY_CLASSES.key]
        if name:
            found = classes.get(("", name))
            if found is None:
                raise errors.forbidden(
                    PODS, pod["metadata"].get("name") or "", f"no PriorityClass with name {name} was found"
                )
        else:
            found = next((c for c in classes.values() if c.get("globalDefault")), None)
        value = int(found["value"]) if found else 0
        if spec.get("priority") is not None and spec["priority"] != value:
            raise errors.forbidden(
                PODS,
                pod["metadata"].get("name") or "",
                "the integer value of priority must not be provided in pod spec",
            )
        spec["priority"] = value
        if found and found.get("preemptionPolicy"):
            spec["preemptionPolicy"] = found["preemptionPolicy"]

    # ----- update / patch -----------------------------------------------------------------------

    def update(
        self,
        resource: ResourceType,
        namespace: str | None,
        name: str,
        mutate: Callable[[dict[str, Any]], dict[str, Any] | None],
        *,
        subresource: str | None = None,
        dry_run: bool = False,
    ) -> dict[str, Any]:
        """Read-modify-write under the store lock. ``mutate`` gets a private copy and may return a new object.

        ``subresource="status"`` keeps everything but ``.status``; the main resource keeps ``.status``
        (for types with a status subresource). A ``metadata.resourceVersion`` in the result that differs
        from the stored one is a precondition: 409 Conflict.
        """
        with self.lock:
            current = self.get(resource, namespace, name, copy_result=False)
            candidate = mutate(copy.deepcopy(current))
            if not isinstance(candidate, dict):
                raise TypeError("mutate must return the new object")
            return self._commit(resource, current, candidate, subresource=subresource, dry_run=dry_run)

    def replace(
        self,
        resource: ResourceType,
        namespace: str | None,
        name: str,
        body: dict[str, Any],
        *,
        subresource: str | None = None,
        dry_run: bool = False,
    ) -> dict[str, Any]:
        """PUT semantics."""
        if not isinstance(body, dict):
            raise errors.bad_request("the request body must be a JSON object")
        if causes := shape_errors(resource, body):
            raise errors.invalid(resource, name, causes)
        body_name = object_name(body)
        if body_name and body_name != name:
            raise errors.bad_request(
                f"the name of the object ({body_name}) does not match the name on the URL ({name})"
            )
        new = copy.deepcopy(body)
        self._check_type(resource, new)
        return self.update(
            resource, namespace, name, lambda _current: new, subresource=subresource, dry_run=dry_run
        )

    def patch(
        self,
        resource: ResourceType,
        namespace: str | None,
        name: str,
        patch: Any,
        patch_type: str,
        *,
        subresource: str | None = None,
        dry_run: bool = False,
    ) -> dict[str, Any]:
        """PATCH semantics; server-side apply (apply-patch+yaml) creates the object when missing."""
        if patch_type == PATCH_STRATEGIC and resource.group not in (
            "",
            "apps",
            "policy",
            "scheduling.k8s.io",
            "rbac.authorization.k8s.io",
        ):
            raise ApiError(
                415,
                "UnsupportedMediaType",
                f"the body of the request was in an unknown format - accepted media types include: {PATCH_JSON}, {PATCH_MERGE}, {PATCH_APPLY}",
            )
        apply_patch = {
            PATCH_MERGE: merge_patch,
            PATCH_STRATEGIC: strategic_merge_patch,
            PATCH_JSON: json_patch,
            PATCH_APPLY: strategic_merge_patch,
        }.get(patch_type)
        if apply_patch is None:
            raise ApiError(
                415,
                "UnsupportedMediaType",
                f"the body of the request was in an unknown format - unsupported patch type {patch_type!r}",
            )
        if patch_type != PATCH_JSON and not isinstance(patch, dict):
            raise errors.bad_request("the patch must be a JSON object")
        with self.lock:
            if patch_type == PATCH_APPLY and self.try_get(resource, namespace, name) is None:
                body = copy.deepcopy(patch)
                body.setdefault("metadata", {})["name"] = name
                return self.create(resource, namespace, body, dry_run=dry_run)

            def mutate(current: dict[str, Any]) -> dict[str, Any]:
                try:
                    patched = apply_patch(current, patch)
                except (JsonPatchError, KeyError, IndexError, TypeError) as exc:
                    raise ApiError(
                        422,
                        "Invalid",
                        f"the server rejected our request due to an error in our request: {exc}",
                    ) from None
                if not isinstance(patched, dict):
                    raise errors.bad_request("the patch did not produce an object")
                if patch_type == PATCH_APPLY:  # apply carries no precondition
                    _meta(patched)["resourceVersion"] = current["metadata"]["resourceVersion"]
                return patched

            return self.update(resource, namespace, name, mutate, subresource=subresource, dry_run=dry_run)

    def _commit(
        self,
        resource: ResourceType,
        current: dict[str, Any],
        new: dict[str, Any],
        *,
        subresource: str | None,
        dry_run: bool,
    ) -> dict[str, Any]:
        cur_meta = current["metadata"]
        name = cur_meta["name"]
        if causes := shape_errors(resource, new):
            raise errors.invalid(resource, name, causes)
        new_meta = _meta(new)
        expected_rv = new_meta.get("resourceVersion")
        if expected_rv not in (None, "", cur_meta["resourceVersion"]):
            raise errors.conflict(resource, name)
        if subresource == "status":
            new = {**current, "status": copy.deepcopy(new.get("status"))}
            if new["status"] is None:
                new.pop("status")
        elif subresource is not None:
            raise errors.bad_request(f"unsupported subresource {subresource!r}")
        elif resource.has_status:
            new = {**new, "status": copy.deepcopy(current.get("status"))}
            if new["status"] is None:
                new.pop("status")
        new_meta = new["metadata"] = dict(new.get("metadata") or {})
        for field in (
            "uid",
            "creationTimestamp",
            "name",
            "namespace",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
            "generation",
            "resourceVersion",
        ):
            if field in cur_meta:
                new_meta[field] = cur_meta[field]
            else:
                new_meta.pop(field, None)
        new["kind"], new["apiVersion"] = resource.kind, resource.api_version
        causes = validate_object(resource, new) + validate_update(resource, current, new)
        if causes:
            raise errors.invalid(resource, name, causes)
        if new == current:
            return copy.deepcopy(current)
        if self._spec_changed(resource, current, new):
            new_meta["generation"] = int(cur_meta.get("generation", 1)) + 1
        if dry_run:
            return new
        new_meta["resourceVersion"] = self._next_rv()
        return self._store_modified(resource, current, new)

    @staticmethod
    def _spec_changed(resource: ResourceType, old: dict[str, Any], new: dict[str, Any]) -> bool:
        if resource.has_status:
            return old.get("spec") != new.get("spec")
        skip = ("metadata", "status")
        return {k: v for k, v in old.items() if k not in skip} != {
            k: v for k, v in new.items() if k not in skip
        }

    def _store_modified(
        self, resource: ResourceType, current: dict[str, Any], new: dict[str, Any]
    ) -> dict[str, Any]:
        key = self._key(resource, new["metadata"].get("namespace"), new["metadata"]["name"])
        self._objects[resource.key][key] = new
        if self._ready_to_remove(resource, new):
            removed = {**new, "metadata": {**new["metadata"], "resourceVersion": self._next_rv()}}
            self._remove(resource, key, removed, current)
            return copy.deepcopy(removed)
        self._emit("MODIFIED", resource, new, current)
        if resource == NAMESPACES:
            self._maybe_finish_namespace(key[1])
        return copy.deepcopy(self._objects[resource.key].get(key, new))

    @staticmethod
    def _ready_to_remove(resource: ResourceType, obj: dict[str, Any]) -> bool:
        """Namespaces go only once empty (see _maybe_finish_namespace); others once nothing holds them."""
        meta = obj["metadata"]
        return (
            resource != NAMESPACES
            and bool(meta.get("deletionTimestamp"))
            and not meta.get("finalizers")
            and not meta.get("deletionGracePeriodSeconds")
        )

    def _remove(
        self, resource: ResourceType, key: tuple[str, str], final: dict[str, Any], previous: dict[str, Any]
    ) -> None:
        del self._objects[resource.key][key]
        self._emit("DELETED", resource, final, previous)
        if resource.namespaced:
            self._maybe_finish_namespace(key[0])

    # ----- bind ---------------------------------------------------------------------------------

    def bind_pod(self, namespace: str, name: str, node_name: str) -> dict[str, Any]:
        """The pods/binding subresource: set spec.nodeName once, on an ungated pod."""
        with self.lock:
            current = self.get(PODS, namespace, name, copy_result=False)
            spec = current.get("spec") or {}
            if spec.get("nodeName"):
                raise (
                    errors.conflict(PODS, name)
                    if spec["nodeName"] == node_name
                    else ApiError(
                        409, "Conflict", f'pod {name} is already assigned to node "{spec["nodeName"]}"'
                    )
                )
            if spec.get("schedulingGates"):
                raise errors.forbidden(PODS, name, "pod has scheduling gates and cannot be bound")
            if current["metadata"].get("deletionTimestamp"):
                raise errors.forbidden(PODS, name, "pod is being deleted")
            new = copy.deepcopy(current)
            new["spec"]["nodeName"] = node_name
            new["metadata"]["resourceVersion"] = self._next_rv()
            return self._store_modified(PODS, current, new)

    # ----- delete -------------------------------------------------------------------------------

    def delete(
        self,
        resource: ResourceType,
        namespace: str | None,
        name: str,
        *,
        grace_period_seconds: int | None = None,
        precondition_uid: str | None = None,
        precondition_resource_version: str | None = None,
        dry_run: bool = False,
    ) -> dict[str, Any]:
        """DELETE semantics. Returns the object (pods, or when finalizers hold it) or a Success Status.

        Pods bound to a node and not terminal are deleted gracefully: deletionTimestamp and
        deletionGracePeriodSeconds are set and the kubelet finishes the deletion. Finalizers keep
        any object (with deletionTimestamp set) until they are removed.
        """
        with self.lock:
            current = self.get(resource, namespace, name, copy_result=False)
            meta = current["metadata"]
            if precondition_uid and precondition_uid != meta["uid"]:
                raise ApiError(
                    409,
                    "Conflict",
                    f"Precondition failed: UID in precondition: {precondition_uid}, UID in object meta: {meta['uid']}",
                )
            if precondition_resource_version and precondition_resource_version != meta["resourceVersion"]:
                raise errors.conflict(resource, name)
            grace = self._grace_period(resource, current, grace_period_seconds)
            if dry_run:
                return copy.deepcopy(current)
            new_meta = dict(meta)
            if not meta.get("deletionTimestamp"):
                new_meta["deletionTimestamp"] = utc_timestamp(grace)
                new_meta["deletionGracePeriodSeconds"] = grace
            elif grace < int(meta.get("deletionGracePeriodSeconds") or 0):
                new_meta["deletionGracePeriodSeconds"] = grace
            else:
                return copy.deepcopy(current)
            new_meta["resourceVersion"] = self._next_rv()
            new = {**current, "metadata": new_meta}
            if resource == NAMESPACES:
                new["status"] = {**(current.get("status") or {}), "phase": "Terminating"}
            key = self._key(resource, namespace, name)
            if self._ready_to_remove(resource, new):
                self._remove(resource, key, new, current)
                return copy.deepcopy(new) if resource == PODS else errors.success_status(resource, new)
            self._objects[resource.key][key] = new
            self._emit("MODIFIED", resource, new, current)
            if resource == NAMESPACES:
                self._delete_namespace_contents(name)
            return copy.deepcopy(new)

    @staticmethod
    def _grace_period(resource: ResourceType, obj: dict[str, Any], requested: int | None) -> int:
        if resource != PODS:
            return 0
        spec, status = obj.get("spec") or {}, obj.get("status") or {}
        if not spec.get("nodeName") or status.get("phase") in _TERMINAL_PHASES:
            return 0
        grace = requested if requested is not None else int(spec.get("terminationGracePeriodSeconds", 30))
        return max(grace, 0)

    def delete_collection(
        self,
        resource: ResourceType,
        namespace: str | None,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
        grace_period_seconds: int | None = None,
        dry_run: bool = False,
    ) -> list[dict[str, Any]]:
        """Delete every matching object; returns their last states."""
        with self.lock:
            matched = self.list(
                resource,
                namespace,
                label_selector=label_selector,
                field_selector=field_selector,
                copy_result=False,
            ).items
            deleted = []
            for obj in matched:
                meta = obj["metadata"]
                result = self.delete(
                    resource,
                    meta.get("namespace"),
                    meta["name"],
                    grace_period_seconds=grace_period_seconds,
                    dry_run=dry_run,
                )
                deleted.append(copy.deepcopy(obj) if result.get("kind") == "Status" else result)
            return deleted

    def _delete_namespace_contents(self, namespace: str) -> None:
        for resource in self.registry.all():
            if not resource.namespaced:
                continue
            for ns, name in list(self._objects[resource.key]):
                if ns == namespace:
                    self.delete(resource, ns, name)
        self._maybe_finish_namespace(namespace)

    def _maybe_finish_namespace(self, namespace: str) -> None:
        ns_obj = self._objects[NAMESPACES.key].get(("", namespace))
        if (
            ns_obj is None
            or not ns_obj["metadata"].get("deletionTimestamp")
            or ns_obj["metadata"].get("finalizers")
        ):
            return
        if any(
            key[0] == namespace for r in self.registry.all() if r.namespaced for key in self._objects[r.key]
        ):
            return
        final = {**ns_obj, "metadata": {**ns_obj["metadata"], "resourceVersion": self._next_rv()}}
        self._remove(NAMESPACES, ("", namespace), final, ns_obj)
