"""FakeApiServer: the object store, pod logs and the HTTP front end, run on a background thread."""

from __future__ import annotations

import shutil
import tempfile
import threading
from collections.abc import Iterable
from pathlib import Path

from iris.testing.fake_apiserver.exec_session import ExecHandler
from iris.testing.fake_apiserver.http_handler import ApiHttpServer
from iris.testing.fake_apiserver.kubeconfig import write_kubeconfig
from iris.testing.fake_apiserver.pod_logs import PodLogs
from iris.testing.fake_apiserver.resources import NAMESPACES, PRIORITY_CLASSES, ResourceRegistry, ResourceType
from iris.testing.fake_apiserver.store import AdmissionHook, ObjectStore
from iris.testing.fake_apiserver.subscriptions import Subscription
from iris.testing.fake_apiserver.tls import generate_tls_material

_SYSTEM_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")
_SYSTEM_PRIORITY_CLASSES = (
    ("system-cluster-critical", 2_000_000_000),
    ("system-node-critical", 2_000_001_000),
)


class FakeApiServer:
    """A Kubernetes API server good enough for kubectl, the official client and lightkube.

    ``tokens``: if given, every request (except /healthz, /readyz, /livez) must carry
    ``Authorization: Bearer <one of them>``, else 401; kubectl only sends tokens over TLS, so use
    ``tls=True`` with tokens when kubectl is a client. ``state_dir`` holds pod logs and TLS files (a
    temporary directory, removed on stop, when omitted).
    """

    def __init__(
        self,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        tokens: Iterable[str] = (),
        state_dir: Path | None = None,
        tls: bool = False,
        history_size: int = 10_000,
        bookmark_interval: float = 1.0,
    ) -> None:
        self.registry = ResourceRegistry()
        self.store = ObjectStore(self.registry, history_size=history_size)
        self.tokens = frozenset(tokens)
        self.exec_handler: ExecHandler | None = None  # set by the kubelet simulator
        self.bookmark_interval = bookmark_interval
        self.stopping = threading.Event()
        self._owns_state_dir = state_dir is None
        self.state_dir = (
            Path(tempfile.mkdtemp(prefix="iris-fake-apiserver-")) if state_dir is None else Path(state_dir)
        )
        self.pod_logs = PodLogs(self.state_dir / "pod-logs")
        self.tls_material = generate_tls_material(self.state_dir / "tls") if tls else None
        ssl_context = self.tls_material.server_context() if self.tls_material else None
        self._httpd = ApiHttpServer((host, port), self, ssl_context)
        self._thread = threading.Thread(
            target=self._httpd.serve_forever,
            kwargs={"poll_interval": 0.05},
            name="fake-apiserver",
            daemon=True,
        )
        for namespace in _SYSTEM_NAMESPACES:
            self.store.create(NAMESPACES, None, {"metadata": {"name": namespace}})
        for name, value in _SYSTEM_PRIORITY_CLASSES:
            self.store.create(
                PRIORITY_CLASSES,
                None,
                {"metadata": {"name": name}, "value": value, "preemptionPolicy": "PreemptLowerPriority"},
            )

    @property
    def url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"{'https' if self.tls_material else 'http'}://{host}:{port}"

    def start(self) -> FakeApiServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self.stopping.set()
        self.store.close_all_subscriptions()
        self.pod_logs.finish_all()
        if self._thread.is_alive():
            self._httpd.shutdown()
        self._httpd.close_connections()
        self._httpd.server_close()
        if self._owns_state_dir:
            shutil.rmtree(self.state_dir, ignore_errors=True)

    def __enter__(self) -> FakeApiServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def register_resource(self, resource: ResourceType) -> None:
        """Serve another kind (generic storage, discovery included)."""
        self.registry.register(resource)

    def add_admission_hook(self, hook: AdmissionHook) -> None:
        """Mutating/validating admission on create, like a webhook (see ``ObjectStore.create``)."""
        self.store.add_admission_hook(hook)

    def subscribe(
        self,
        resource: ResourceType,
        namespace: str | None = None,
        *,
        resource_version: str | None = None,
        wakeup: threading.Event | None = None,
    ) -> Subscription:
        """In-process change feed for simulators (no HTTP, no polling); see ``ObjectStore.subscribe``."""
        return self.store.subscribe(resource, namespace, resource_version=resource_version, wakeup=wakeup)

    def write_kubeconfig(self, path: Path, *, namespace: str = "default") -> Path:
        """A kubeconfig for this server (first configured token, CA data when serving TLS)."""
        token = next(iter(sorted(self.tokens)), None)
        ca = self.tls_material.ca_pem() if self.tls_material else None
        return write_kubeconfig(path, self.url, token, namespace, certificate_authority_pem=ca)
