"""The controller process: the control loop plus the HTTP API and dashboard on one port."""

from __future__ import annotations

import gc
import json
import logging
import os
import secrets
import signal
import socket
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any

import uvicorn

from iris.cluster.config import ClusterConfig, load_cluster_config
from iris.cluster.controller import store
from iris.cluster.controller.auth import Authenticator, JobRun, StaticToken
from iris.cluster.controller.autoscaler import Autoscaler, AutoscalerStore
from iris.cluster.controller.backend import BackendDescriptor, BackendKind
from iris.cluster.controller.controller import Controller, create_controller, open_db
from iris.cluster.controller.db import ControllerDB
from iris.cluster.controller.service import create_app
from iris.cluster.controller.state_lock import StateDirInUse, lock_state_dir
from iris.cluster.runtime.private_state import make_private, private_umask
from iris.rpc.enums import TERMINAL_JOB_STATES
from iris.rpc.logging_setup import LOG_FORMATS
from iris.rpc.logging_setup import configure_logging as configure_structured_logging

log = logging.getLogger("iris.controller")

DASHBOARD_DIR = Path(__file__).parent / "dashboard" / "static"


def bind_socket(host: str, port: int) -> socket.socket:
    # proto=IPPROTO_TCP makes asyncio set TCP_NODELAY on accepted connections (no delayed-ACK stalls).
    sock = socket.socket(
        socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP
    )
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
    advertise_url: str | None = None,
    terminate_slices_on_exit: bool = False,
    also_listen: tuple[str, ...] = (),
) -> None:
    """Serve the API until SIGTERM/SIGINT, then stop the control loop. ``also_listen``: more
    addresses served on the same port (a local real node's pods reach the controller there)."""
    sock = bind_socket(host, port)
    bound_port = sock.getsockname()[1]
    sockets = [sock, *(bind_socket(extra, bound_port) for extra in also_listen)]
    url = f"http://{host}:{bound_port}"
    controller.set_url(advertise_url or url)
    app = create_app(controller, dashboard_dir=DASHBOARD_DIR)
    config = uvicorn.Config(
        app, log_level="warning", access_log=False, timeout_keep_alive=120, lifespan="off", log_config=None
    )
    server = uvicorn.Server(config)
    # What start-up built (modules, the app, caches) lives as long as the process: keep it out of
    # every later collection. A full collection over it took ~35 ms in the middle of a request.
    gc.collect()
    gc.freeze()
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
        server.run(sockets=sockets)
    finally:
        controller.stop()
        if terminate_slices_on_exit and controller.autoscaler is not None:
            # An embedded cluster owns its machines: they go when it goes.
            controller.autoscaler.terminate_all("the local cluster stopped")
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
    config: ClusterConfig | None = None,
    environment_dir: str | None = None,
    host_runner: bool = False,
) -> Controller:
    """The controller a command line (and optionally a cluster config file) describes."""
    # 0700, every file 0600: the database holds every user's environment and the token secret.
    make_private(state_dir)
    controller = _build_controller(
        backend=backend,
        state_dir=state_dir,
        kubeconfig=kubeconfig,
        namespace=namespace,
        queue=queue,
        image=image,
        tick_interval_s=tick_interval_s,
        worker_grace_s=worker_grace_s,
        config=config,
        environment_dir=environment_dir,
        host_runner=host_runner,
    )
    if config is not None:
        controller.logs.max_age_s = config.logs.max_age_hours * 3600
        controller.logs.max_total_bytes = config.logs.max_total_size
        controller.logs.max_job_bytes = config.logs.max_job_size
        controller.task_env = dict(config.defaults.task_env)
        controller.forward_env = list(config.forward_env)
        controller.budgets.set_defaults(config.user_budgets)
        worker_defaults = config.defaults.worker
        controller.drain_grace_s = worker_defaults.drain_grace_s
        controller.quarantine.threshold = worker_defaults.quarantine_failures
        controller.quarantine.window_s = worker_defaults.quarantine_window_s
    return controller


def _build_controller(
    *,
    backend: str,
    state_dir: Path,
    kubeconfig: str | None,
    namespace: str,
    queue: str,
    image: str | None,
    tick_interval_s: float,
    worker_grace_s: float,
    config: ClusterConfig | None,
    environment_dir: str | None = None,
    host_runner: bool = False,
) -> Controller:
    db = open_db(state_dir)
    configured = config.auth.tokens if config is not None else []
    tokens = [StaticToken(t.token, t.role, t.user) for t in configured] or _local_tokens()
    auth = _authenticator(db, tokens) if config is not None or tokens else None
    if backend in ("worker", BackendKind.WORKER.value):
        backend_id, display_name = "local-workers", "Iris workers"
        if config is not None:
            backend_id = config.backend.backend_id
            display_name = config.backend.display_name or config.name
        descriptor = BackendDescriptor(
            backend_id=backend_id,
            kind=BackendKind.WORKER,
            display_name=display_name,
            scale_groups=frozenset(config.scale_groups) if config is not None else frozenset(),
        )
        scaled = config is not None and bool(config.scale_groups)
        return create_controller(
            descriptor,
            state_dir=state_dir,
            db=db,
            auth=auth,
            autoscaler=_build_autoscaler(db, config, state_dir) if config is not None and scaled else None,
            autoscale_interval_s=config.defaults.autoscaler.evaluation_interval_s
            if config is not None
            else 1.0,
            tick_interval_s=tick_interval_s,
            worker_grace_s=worker_grace_s,
            default_task_image=config.defaults.task_image if config is not None else None,
        )
    from iris.cluster.backends.kubernetes import KubernetesBackend, KubernetesBackendConfig

    settings: dict[str, Any] = dict((config.backend.kubernetes or {}) if config is not None else {})
    settings.setdefault("namespace", namespace)
    settings.setdefault("local_queue", queue)
    if kubeconfig:
        settings["kubeconfig"] = kubeconfig
    if image:
        settings["default_image"] = image
    elif config is not None and config.defaults.task_image and "default_image" not in settings:
        settings["default_image"] = config.defaults.task_image
    if environment_dir:  # a default: the config's kubernetes.environment_dir wins
        settings.setdefault("environment_dir", environment_dir)
    if host_runner:
        settings["host_runner"] = True
    if not settings.get("kubeconfig"):
        settings["in_cluster"] = True
    k8s_config = KubernetesBackendConfig(**settings)
    descriptor = BackendDescriptor(
        backend_id=config.backend.backend_id if config is not None else "kubernetes",
        kind=BackendKind.KUBERNETES,
        display_name=(config.backend.display_name if config is not None else "") or "Kubernetes (Kueue)",
    )
    pods = KubernetesBackend(k8s_config, controller_url="", backend_id=descriptor.backend_id)
    return create_controller(
        descriptor, state_dir=state_dir, db=db, auth=auth, backend=pods, tick_interval_s=tick_interval_s
    )


# A local cluster's one-time tokens (``iris cluster start --local``): an admin token for the user
# who started it (printed in the dashboard URL) and one for its workers. Taken out of the
# environment at once, so nothing the controller starts inherits them.
LOCAL_TOKEN_ENV = "IRIS_CONTROLLER_LOCAL_TOKEN"
LOCAL_USER_ENV = "IRIS_CONTROLLER_LOCAL_USER"
LOCAL_WORKER_TOKEN_ENV = "IRIS_CONTROLLER_LOCAL_WORKER_TOKEN"


def _local_tokens() -> list[StaticToken]:
    admin = os.environ.pop(LOCAL_TOKEN_ENV, "")
    user = os.environ.pop(LOCAL_USER_ENV, "") or None
    worker = os.environ.pop(LOCAL_WORKER_TOKEN_ENV, "")
    tokens = [StaticToken(admin, "admin", user)] if admin else []
    return tokens + ([StaticToken(worker, "worker")] if worker else [])


def _authenticator(db: ControllerDB, tokens: list[StaticToken]) -> Authenticator:
    """These tokens, and a signing secret for job tokens that survives restarts."""
    if not tokens:
        return Authenticator()
    with db.transaction() as cur:
        secret = store.meta_value(cur, "auth_secret")
        if secret is None:
            secret = secrets.token_hex(32)
            store.set_meta_value(cur, "auth_secret", secret)

    def job_run(job_id: str) -> JobRun | None:
        """The job's current run (a job token works only for its own run, until it finishes)."""
        with db.read() as cur:
            job = store.get_job(cur, job_id)
        return None if job is None else JobRun(job.run_uid, job.state in TERMINAL_JOB_STATES)

    return Authenticator(tokens, secret=bytes.fromhex(secret), job_run=job_run)


def _build_autoscaler(db: ControllerDB, config: ClusterConfig, state_dir: Path) -> Autoscaler:
    from iris.cluster.platforms.factory import make_platform

    def registered_workers() -> list[tuple[str, str]]:
        with db.read() as cur:
            return [(w.worker_id, w.address) for w in store.list_workers(cur)]

    worker_tokens = [t.token for t in config.auth.tokens if t.role == "worker"]
    platform = make_platform(
        config.platform,
        state_dir / "platform",
        registered_workers=registered_workers,
        reregister_after_s=config.defaults.worker.reregister_after_s,
        # Workers the autoscaler starts authenticate with the config's first worker token.
        worker_env={"IRIS_TOKEN": worker_tokens[0]} if worker_tokens else None,
    )
    return Autoscaler.from_config(config, platform, AutoscalerStore(db.connection, db.lock))


def configure_logging(log_format: str | None = None, log_file: Path | None = None) -> None:
    """Text (default) or JSON lines, on stderr or in a rotating file; see iris.rpc.logging_setup."""
    configure_structured_logging(log_format, log_file)
    for noisy in ("httpx", "httpx2", "httpcore"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


@dataclass(frozen=True)
class ControllerOptions:
    """Everything a controller process is started with; parsed once, by argparse or by the CLI."""

    # None: the config file's controller section, else 127.0.0.1:10000 and ~/.iris/controller.
    host: str | None = None
    port: int | None = None
    state_dir: Path | None = None
    ready_file: Path | None = None
    backend: str = "worker"
    kubeconfig: str | None = None
    namespace: str = "iris"
    queue: str = "iris"
    tick: float = 1.0
    worker_grace: float = 60.0
    terminate_slices_on_exit: bool = False
    advertise_url: str | None = None
    # More addresses to serve on (same port); only with tokens (see ``check_also_listen``).
    also_listen: tuple[str, ...] = ()
    image: str | None = None
    environment_dir: str | None = None
    # kubernetes backend: KubernetesBackendConfig.host_runner (a local cluster's real node).
    host_runner: bool = False
    config: Path | None = None
    log_format: str | None = None
    log_file: Path | None = None


def listen_and_state(options: ControllerOptions, config: ClusterConfig | None) -> tuple[str, int, Path]:
    """Host, port and state directory: the options given, else the config's controller section,
    else 127.0.0.1, 10000 and ~/.iris/controller."""
    section = config.controller if config is not None else None
    host = options.host or (section.host if section else "127.0.0.1")
    port = options.port if options.port is not None else (section.port if section else 10000)
    state_dir = options.state_dir or (section.state_dir if section else Path.home() / ".iris" / "controller")
    return host, port, Path(state_dir).expanduser()


def check_also_listen(addresses: tuple[str, ...], auth_enabled: bool) -> str | None:
    """Why the controller must not serve on ``addresses`` (one sentence), or None: an address
    beyond loopback takes callers by token only, so it needs auth (a config's ``auth.tokens`` or
    a local cluster's one-time token)."""
    if addresses and not auth_enabled:
        return (
            f"--also-listen {', '.join(addresses)} needs auth: configure auth.tokens (or start the"
            " local cluster without --no-auth); an open controller listens on loopback only"
        )
    return None


def _interrupt(signum: int, frame: FrameType | None) -> None:
    """SIGTERM stops the controller as Ctrl-C does."""
    raise KeyboardInterrupt


def run(options: ControllerOptions) -> None:
    """Build the controller the options describe and serve it until SIGTERM/SIGINT."""
    private_umask()  # the database, its WAL, logs and bundles are created 0600
    configure_logging(options.log_format, options.log_file)
    signal.signal(signal.SIGTERM, _interrupt)
    config = load_cluster_config(options.config) if options.config else None
    backend = options.backend
    tick, grace = options.tick, options.worker_grace
    if config is not None:
        backend = "kubernetes" if config.backend.kind == "kubernetes" else backend
        tick = config.defaults.worker.reconcile_interval_s
        grace = config.defaults.worker.unreachable_grace_s
    host, port, state_dir = listen_and_state(options, config)
    try:
        lock_state_dir(Path(state_dir))  # before the database opens: one controller per state dir
    except StateDirInUse as exc:
        sys.stderr.write(f"error: {exc}\n")
        raise SystemExit(1) from None
    controller = build_controller(
        backend=backend,
        state_dir=Path(state_dir).expanduser(),
        kubeconfig=options.kubeconfig,
        namespace=options.namespace,
        queue=options.queue,
        tick_interval_s=tick,
        worker_grace_s=grace,
        config=config,
        image=options.image,
        environment_dir=options.environment_dir,
        host_runner=options.host_runner,
    )
    refusal = check_also_listen(options.also_listen, controller.auth.enabled)
    if refusal:
        sys.stderr.write(f"error: {refusal}\n")
        raise SystemExit(1)
    try:
        serve(
            controller,
            host=host,
            port=port,
            ready_file=options.ready_file,
            advertise_url=options.advertise_url,
            terminate_slices_on_exit=options.terminate_slices_on_exit,
            also_listen=options.also_listen,
        )
    except KeyboardInterrupt:
        pass


def main(argv: list[str] | None = None) -> None:
    """``python -m iris.cluster.controller``: the same options as ``iris controller start``."""
    import argparse

    parser = argparse.ArgumentParser(
        prog="python -m iris.cluster.controller", description="Run the Iris controller."
    )
    parser.add_argument("--host", help="listen address (default: the config's, else 127.0.0.1)")
    parser.add_argument("--port", type=int, help="listen port (default: the config's, else 10000)")
    parser.add_argument(
        "--state-dir", type=Path, help="where the SQLite database lives (default ~/.iris/controller)"
    )
    parser.add_argument("--ready-file", type=Path)
    parser.add_argument("--backend", choices=["worker", "kubernetes"], default="worker")
    parser.add_argument("--kubeconfig")
    parser.add_argument("--namespace", default="iris")
    parser.add_argument("--queue", default="iris")
    parser.add_argument("--tick", type=float, default=1.0)
    parser.add_argument("--worker-grace", type=float, default=60.0)
    parser.add_argument(
        "--terminate-slices-on-exit",
        action="store_true",
        help="stop the autoscaler's machines when the controller stops (embedded local clusters)",
    )
    parser.add_argument("--advertise-url", help="URL tasks and workers use to reach this controller")
    parser.add_argument(
        "--also-listen",
        action="append",
        default=[],
        metavar="HOST",
        help="serve on this address too, on the same port (repeatable; needs auth)",
    )
    parser.add_argument("--image", help="kubernetes backend: container image for task pods")
    parser.add_argument(
        "--environment-dir",
        help="kubernetes backend: directory on each node where job environments are built "
        "(unless the config sets kubernetes.environment_dir)",
    )
    parser.add_argument(
        "--host-runner",
        action="store_true",
        help="kubernetes backend: callables' pods mount this machine's iris (its nodes are this machine)",
    )
    parser.add_argument(
        "--config", type=Path, help="cluster config file (YAML); its scale groups enable the autoscaler"
    )
    parser.add_argument(
        "--log-format",
        choices=LOG_FORMATS,
        help="text (default, or $IRIS_LOG_FORMAT) or json: one object per line",
    )
    parser.add_argument(
        "--log-file",
        type=Path,
        help="write logs here instead of stderr, rotated at 20 MB x 5 (or $IRIS_LOG_FILE)",
    )
    args = parser.parse_args(argv)
    args.also_listen = tuple(args.also_listen)
    run(ControllerOptions(**vars(args)))


if __name__ == "__main__":
    main()
