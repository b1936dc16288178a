"""The few Kubernetes API calls the backend makes, over lightkube, with pods as plain dicts.

Everything above this module sees dicts shaped like the API's JSON; everything about
connections, credentials, pagination and error shapes stays here.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import httpx2
import msgspec
from lightkube import ApiError, Client, KubeConfig
from lightkube.config.kubeconfig import SingleConfig
from lightkube.config.models import User
from lightkube.core import resource as lightkube_resource
from lightkube.generic_resource import Generic, create_api_info
from lightkube.types import CascadeType, OnErrorAction, OnErrorResult, PatchType

from iris.cluster.backends.kubernetes.config import KubernetesBackendConfig

logger = logging.getLogger(__name__)
# httpx2 logs every request at INFO: one line per pod per round would drown the controller's log.
if logging.getLogger("httpx2").level == logging.NOTSET:
    logging.getLogger("httpx2").setLevel(logging.WARNING)

KUEUE_GROUP = "kueue.x-k8s.io"
# Newest first: Kueue >= 0.15 stores v1beta2, older releases serve only v1beta1.
KUEUE_VERSIONS = ("v1beta2", "v1beta1")


def _dict_resource(group: str, version: str, kind: str, plural: str, *, namespaced: bool) -> Any:
    """A lightkube resource class whose objects stay plain dicts.

    lightkube's typed models reject an object missing a field they require; one odd pod must
    never make the whole listing unreadable, so every resource is read as JSON and the pure
    code above copes with whatever fields are there.
    """
    base = lightkube_resource.NamespacedResourceG if namespaced else lightkube_resource.GlobalResource

    class DictResource(base, Generic):  # type: ignore[misc, valid-type]
        _api_info = create_api_info(group, version, kind, plural)

    DictResource.__name__ = DictResource.__qualname__ = kind
    return DictResource


Pod = _dict_resource("", "v1", "Pod", "pods", namespaced=True)
Secret = _dict_resource("", "v1", "Secret", "secrets", namespaced=True)
Node = _dict_resource("", "v1", "Node", "nodes", namespaced=False)
Event = _dict_resource("", "v1", "Event", "events", namespaced=True)
_WORKLOADS = {
    v: _dict_resource(KUEUE_GROUP, v, "Workload", "workloads", namespaced=True) for v in KUEUE_VERSIONS
}


class KubeApiError(Exception):
    """An API call failed; ``status`` is the HTTP status (0 when the server was not reached)."""

    def __init__(self, status: int, reason: str, message: str) -> None:
        super().__init__(f"{status} {reason}: {message}" if status else message)
        self.status = status
        self.reason = reason
        self.message = message


@dataclass(frozen=True)
class ExecResult:
    exit_code: int
    stdout: str
    stderr: str


# What a request can fail with: an API status, a transport error, or a body that is not JSON.
_API_ERRORS = (ApiError, httpx2.HTTPError, msgspec.MsgspecError)


def load_kube_config(config: KubernetesBackendConfig) -> SingleConfig:
    """Credentials and server address, the way kubectl would find them."""
    if config.in_cluster:
        kube = KubeConfig.from_service_account()
    elif config.kubeconfig:
        kube = KubeConfig.from_file(config.kubeconfig)
    else:
        kube = KubeConfig.from_env()
    single = kube.get(context_name=config.context)
    if single is None:
        raise ValueError(f"kubeconfig has no context {config.context!r}")
    if config.token:
        single = single._replace(user=User(token=config.token))
    elif single.user is None:
        single = single._replace(user=User())
    return single


def _error(exc: Exception) -> KubeApiError:
    if isinstance(exc, ApiError) and exc.status is not None:
        status = exc.status
        return KubeApiError(status.code or 0, status.reason or "", status.message or str(exc))
    if isinstance(exc, httpx2.HTTPStatusError):
        response = exc.response
        reason, message = response.reason_phrase, response.text[:500]
        try:
            body = response.json()
            reason, message = body.get("reason", reason), body.get("message", message)
        except ValueError:
            pass
        return KubeApiError(response.status_code, reason, message)
    if isinstance(exc, msgspec.MsgspecError):
        return KubeApiError(
            0, "BadResponse", f"the Kubernetes API answered something that is not JSON: {exc}"
        )
    return KubeApiError(0, type(exc).__name__, f"Kubernetes API unreachable: {exc}")


class KubeApi:
    """Namespaced access to pods (CRUD, logs, exec), plus read-only nodes, events and Kueue
    Workloads. Thread-safe: one connection pool shared by concurrent calls."""

    def __init__(self, config: KubernetesBackendConfig) -> None:
        self.namespace = config.namespace
        self._page = config.list_page_size
        self._client = Client(
            load_kube_config(config),
            namespace=config.namespace,
            timeout=httpx2.Timeout(config.request_timeout_s),
            field_manager="iris",
        )
        self._kueue_version: str | None = None

    @property
    def server(self) -> str:
        return self._client.config.cluster.server

    def close(self) -> None:
        self._client.close()

    # ------------------------------------------------------------ pods

    def list_pods(self, labels: dict[str, str]) -> list[dict[str, Any]]:
        """All pods matching ``labels``, read page by page (limit/continue)."""
        for _ in range(3):
            try:
                pods = self._client.list(Pod, namespace=self.namespace, labels=labels, chunk_size=self._page)
                return [dict(p) for p in pods]
            except _API_ERRORS as exc:
                err = _error(exc)
                if err.status != 410:  # 410: the continue token expired mid-listing; start over
                    raise err from exc
        raise KubeApiError(410, "Expired", "pod listing kept expiring; the API server is overloaded")

    def watch_pods(
        self,
        labels: dict[str, str],
        *,
        should_stop: Callable[[], bool],
        server_timeout_s: int = 60,
        resource_version: str | None = None,
    ) -> Iterator[tuple[str, dict[str, Any]]]:
        """(event type, pod) for every change to matching pods, reconnecting after errors
        (resuming from the last resourceVersion, or from scratch after 410 Gone) until
        ``should_stop()``."""

        def on_error(exc: Exception, count: int) -> OnErrorResult:
            if should_stop():
                return OnErrorResult(OnErrorAction.STOP)
            logger.info("pod watch interrupted (attempt %d), reconnecting: %s", count, exc)
            return OnErrorResult(OnErrorAction.RETRY, sleep=min(5.0, 0.2 * count))

        events = self._client.watch(
            Pod,
            namespace=self.namespace,
            labels=labels,
            server_timeout=server_timeout_s,
            resource_version=resource_version,
            on_error=on_error,
        )
        for kind, obj in events:
            yield kind, dict(obj)
            if should_stop():
                return

    def create_pod(self, manifest: dict[str, Any]) -> dict[str, Any]:
        try:
            return dict(self._client.create(Pod(manifest)))
        except _API_ERRORS as exc:
            raise _error(exc) from exc

    # ------------------------------------------------------------ per-attempt secrets

    def put_secret(self, manifest: dict[str, Any]) -> None:
        """Create the Secret, or (made by an earlier round whose answer was lost) set its data."""
        try:
            self._client.create(Secret(manifest))
            return
        except _API_ERRORS as exc:
            err = _error(exc)
            if err.status != 409:
                raise err from exc
        name = manifest["metadata"]["name"]
        try:
            self._client.patch(
                Secret, name, {"data": manifest["data"]}, namespace=self.namespace,
                patch_type=PatchType.MERGE,
            )  # fmt: skip
        except _API_ERRORS as exc:
            raise _error(exc) from exc

    def own_secret(self, name: str, pod: dict[str, Any]) -> None:
        """Make ``pod`` the Secret's owner: the garbage collector deletes it with the pod."""
        meta = pod.get("metadata") or {}
        owner = {
            "apiVersion": "v1",
            "kind": "Pod",
            "name": meta.get("name", ""),
            "uid": meta.get("uid", ""),
            "blockOwnerDeletion": False,
        }
        try:
            self._client.patch(
                Secret, name, {"metadata": {"ownerReferences": [owner]}}, namespace=self.namespace,
                patch_type=PatchType.MERGE,
            )  # fmt: skip
        except _API_ERRORS as exc:
            raise _error(exc) from exc

    def get_secret(self, name: str) -> dict[str, Any] | None:
        return self._get(Secret, name)

    def delete_secret(self, name: str) -> bool:
        return self._delete(Secret, name)

    def get_pod(self, name: str) -> dict[str, Any] | None:
        return self._get(Pod, name)

    def delete_pod(self, name: str) -> bool:
        """Delete (the kubelet gets the normal grace period); False if it was already gone."""
        return self._delete(Pod, name, cascade=CascadeType.BACKGROUND)

    def _get(self, kind: Any, name: str) -> dict[str, Any] | None:
        """The object, or None when there is no such object."""
        try:
            return dict(self._client.get(kind, name, namespace=self.namespace))
        except _API_ERRORS as exc:
            err = _error(exc)
            if err.status == 404:
                return None
            raise err from exc

    def _delete(self, kind: Any, name: str, **options: Any) -> bool:
        """Delete the object; False if it was already gone."""
        try:
            self._client.delete(kind, name, namespace=self.namespace, **options)
            return True
        except _API_ERRORS as exc:
            err = _error(exc)
            if err.status == 404:
                return False
            raise err from exc

    def pod_log(self, name: str, container: str) -> list[str]:
        """The container's whole log, each line prefixed by its RFC 3339 timestamp."""
        try:
            return list(
                self._client.log(
                    name, namespace=self.namespace, container=container, timestamps=True, newlines=False
                )
            )
        except _API_ERRORS as exc:
            raise _error(exc) from exc

    def follow_pod_log(self, name: str, container: str) -> Iterator[str]:
        """Stream the log until the container ends (or the connection drops)."""
        try:
            yield from self._client.log(
                name,
                namespace=self.namespace,
                container=container,
                timestamps=True,
                follow=True,
                newlines=False,
            )
        except _API_ERRORS as exc:
            raise _error(exc) from exc

    def exec(self, name: str, container: str, argv: list[str], timeout_s: float) -> ExecResult:
        try:
            response = self._client.exec(
                name,
                namespace=self.namespace,
                container=container,
                command=argv,
                stdout=True,
                stderr=True,
                timeout=timeout_s,
            )
        except _API_ERRORS as exc:
            raise _error(exc) from exc
        except Exception as exc:  # the websocket layer raises its own types
            raise KubeApiError(0, type(exc).__name__, f"exec into pod {name} failed: {exc}") from exc
        return ExecResult(
            exit_code=response.exit_code, stdout=response.stdout or "", stderr=response.stderr or ""
        )

    # ------------------------------------------------------------ read-only context

    def list_pod_events(self, pod: str) -> list[dict[str, Any]]:
        try:
            events = self._client.list(
                Event,
                namespace=self.namespace,
                fields={"involvedObject.name": pod},
                chunk_size=self._page,
            )
            return [dict(e) for e in events]
        except _API_ERRORS as exc:
            raise _error(exc) from exc

    def list_events_with_reason(self, reason: str) -> list[dict[str, Any]]:
        """The namespace's events with this ``reason`` (e.g. Kueue's "Stopped")."""
        try:
            events = self._client.list(
                Event, namespace=self.namespace, fields={"reason": reason}, chunk_size=self._page
            )
            return [dict(e) for e in events]
        except _API_ERRORS as exc:
            raise _error(exc) from exc

    def list_nodes(self) -> list[dict[str, Any]]:
        try:
            return [dict(n) for n in self._client.list(Node, chunk_size=self._page)]
        except _API_ERRORS as exc:
            raise _error(exc) from exc

    def list_workloads(self) -> list[dict[str, Any]]:
        """Kueue Workloads of the namespace, in whichever API version the cluster serves."""
        versions = (self._kueue_version,) if self._kueue_version else KUEUE_VERSIONS
        last: KubeApiError | None = None
        for version in versions:
            try:
                items = self._client.list(
                    _WORKLOADS[version], namespace=self.namespace, chunk_size=self._page
                )
                workloads = [dict(w) for w in items]
            except _API_ERRORS as exc:
                last = _error(exc)
                if last.status == 404:
                    continue
                raise last from exc
            self._kueue_version = version
            return workloads
        raise last or KubeApiError(404, "NotFound", "Kueue Workloads are not served by this cluster")
