"""The controller process: the control loop plus the HTTP API and dashboard on one port."""

from __future__ import annotations

import json
import logging
import os
import signal
import socket
import threading
from pathlib import Path
from typing import Any

import uvicorn

from iris.cluster.controller.backend import BackendDescriptor, BackendKind
from iris.cluster.controller.controller import Controller, create_controller
from iris.cluster.controller.service import create_app

log = logging.getLogger("iris.controller")

DASHBOARD_DIR = Path(__file__).parent / "dashboard" / "static"


def bind_socket(host: str, port: int) -> socket.socket:
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(2048)
    sock.set_inheritable(True)
    return sock


def write_ready_file(path: Path, payload: dict[str, Any]) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(payload))
    os.replace(tmp, path)


def serve(
    controller: Controller,
    *,
    host: str = "127.0.0.1",
    port: int = 10000,
    ready_file: Path | None = None,
    extra_ready: dict[str, Any] | None = None,
) -> None:
    """Serve the API until SIGTERM/SIGINT, then stop the control loop."""
    sock = bind_socket(host, port)
    bound_port = sock.getsockname()[1]
    url = f"http://{host}:{bound_port}"
    controller.controller_url = url
    app = create_app(controller, dashboard_dir=DASHBOARD_DIR)
    config = uvicorn.Config(
        app, log_level="warning", access_log=False, timeout_keep_alive=120, lifespan="off"
    )
    server = uvicorn.Server(config)
    controller.start()

    def _announce() -> None:
        while not server.started and not server.should_exit:
            threading.Event().wait(0.01)
        if server.started:
            log.info("controller serving at %s", url)
            if ready_file is not None:
                write_ready_file(ready_file, {"url": url, "pid": os.getpid(), **(extra_ready or {})})

    threading.Thread(target=_announce, daemon=True).start()
    try:
        server.run(sockets=[sock])
    finally:
        controller.stop()
        controller.db.close()


def build_controller(
    *,
    backend: str,
    state_dir: Path,
    kubeconfig: str | None = None,
    namespace: str = "iris",
    queue: str = "iris",
    image: str | None = None,
    tick_interval_s: float = 1.0,
    worker_grace_s: float = 10.0,
    autoscaler: Any | None = None,
) -> Controller:
    state_dir.mkdir(parents=True, exist_ok=True)
    if backend in ("worker", BackendKind.WORKER.value):
        descriptor = BackendDescriptor(
            backend_id="local-workers",
            kind=BackendKind.WORKER,
            display_name="Iris workers",
            scale_groups=frozenset(getattr(autoscaler, "group_names", ()) or ()),
        )
        return create_controller(
            descriptor,
            state_dir=state_dir,
            autoscaler=autoscaler,
            tick_interval_s=tick_interval_s,
            worker_grace_s=worker_grace_s,
        )
    from iris.cluster.backends.kubernetes import KubernetesBackend, KubernetesBackendConfig

    settings: dict[str, Any] = {"namespace": namespace, "local_queue": queue, "kubeconfig": kubeconfig}
    if image:
        settings["default_image"] = image
    if kubeconfig is None:
        settings["in_cluster"] = True
    config = KubernetesBackendConfig(**{k: v for k, v in settings.items() if v is not None})
    descriptor = BackendDescriptor(
        backend_id="kubernetes", kind=BackendKind.KUBERNETES, display_name="Kubernetes (Kueue)"
    )
    pod_backend = KubernetesBackend(config, controller_url="", backend_id=descriptor.backend_id)
    return create_controller(
        descriptor, state_dir=state_dir, pod_backend=pod_backend, tick_interval_s=tick_interval_s
    )


def main(argv: list[str] | None = None) -> None:
    import argparse

    parser = argparse.ArgumentParser(
        prog="python -m iris.cluster.controller", description="Run the Iris controller."
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=10000)
    parser.add_argument("--state-dir", type=Path, default=Path.home() / ".iris" / "controller")
    parser.add_argument("--ready-file", type=Path)
    parser.add_argument("--backend", choices=["worker", "kubernetes"], default="worker")
    parser.add_argument("--kubeconfig")
    parser.add_argument("--namespace", default="iris")
    parser.add_argument("--queue", default="iris")
    parser.add_argument("--tick", type=float, default=1.0)
    parser.add_argument("--worker-grace", type=float, default=10.0)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    controller = build_controller(
        backend=args.backend,
        state_dir=args.state_dir,
        kubeconfig=args.kubeconfig,
        namespace=args.namespace,
        queue=args.queue,
        tick_interval_s=args.tick,
        worker_grace_s=args.worker_grace,
    )
    try:
        serve(controller, host=args.host, port=args.port, ready_file=args.ready_file)
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
