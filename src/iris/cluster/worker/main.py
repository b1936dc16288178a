"""Start a worker daemon: bind, clean up a previous run, serve, register, and die cleanly on SIGTERM."""

from __future__ import annotations

import json
import logging
import os
import resource
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path

import uvicorn

from iris.cluster.runtime import SubprocessRuntime
from iris.cluster.runtime.container import ContainerTaskRuntime
from iris.cluster.runtime.isolation import Isolation, probe, reexec_with_private_proc
from iris.cluster.runtime.private_state import make_private, private_umask
from iris.cluster.worker.config import (
    WorkerConfig,
    WorkerConfigError,
    default_state_dir,
    default_worker_id,
    worker_capacity,
)
from iris.cluster.worker.controller_link import ControllerLink
from iris.cluster.worker.devices import DeviceBroker, device_attributes, resolve_devices
from iris.cluster.worker.fencing import SelfFence
from iris.cluster.worker.health import HealthCache
from iris.cluster.worker.log_shipper import LogShipper
from iris.cluster.worker.metrics import Phase, WorkerMetrics
from iris.cluster.worker.prepare import AttemptPreparer
from iris.cluster.worker.service import WorkerService, create_app
from iris.cluster.worker.usage import UsageSampler
from iris.cluster.worker.watchdog import HEARTBEAT_FILE, Heartbeat, read_heartbeat, start_watchdog
from iris.rpc.enums import TaskState
from iris.rpc.logging_setup import configure_logging
from iris.rpc.models import RegisterRequest
from iris.rpc.signing import RequestVerifier

logger = logging.getLogger(__name__)


def advertised_host(bind_host: str) -> str:
    """The host others should dial: the bind host, or this machine's address when bound to all."""
    if bind_host not in ("0.0.0.0", "::", ""):
        return bind_host
    try:
        return socket.gethostbyname(socket.gethostname())
    except OSError:
        return "127.0.0.1"


def write_ready_file(path: Path, worker_id: str, address: str) -> None:
    """Atomically: a launcher polling for the file never reads half of it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps({"worker_id": worker_id, "address": address}))
    os.replace(tmp, path)


def listen(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # proto must say TCP: asyncio only sets TCP_NODELAY on sockets whose proto is IPPROTO_TCP, and
    # without it every small response waits ~40 ms for a delayed ACK (Nagle).
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise WorkerConfigError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    sock.listen(2048)
    return sock


def raise_open_file_limit() -> None:
    """Each running attempt holds four fds (two pipes, a pidfd, its log): allow as many as the hard limit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or hard > soft:
        try:
            resource.setrlimit(
                resource.RLIMIT_NOFILE, (hard if hard != resource.RLIM_INFINITY else 1 << 20, hard)
            )
        except (ValueError, OSError):
            logger.warning("could not raise the open-file limit above %d", soft)


def _isolation(config: WorkerConfig, state_dir: Path) -> Isolation | None:
    """Per-attempt uids when root (checked once by running a probe); None otherwise."""
    try:
        isolation = Isolation.detect(state_dir, config.task_uids)
    except OSError as exc:
        raise WorkerConfigError(f"cannot set up task isolation: {exc.strerror or exc}") from None
    if isolation is None:
        if os.geteuid() == 0 and config.task_uids is None:
            logger.warning("--task-uids off: attempts run as root and can read each other's environment")
        return None
    problem = probe(isolation)
    if problem is not None:
        logger.warning(
            "attempts run as root, NOT isolated from each other: %s; install Python and Iris where "
            "other users can read them (or pass --task-uids off to say this is intended)",
            problem,
        )
        return None
    os.chmod(state_dir, 0o711 if isolation.task_root.is_relative_to(state_dir.resolve()) else 0o700)
    logger.info(
        "attempts run as uids %d-%d, work dirs under %s",
        isolation.pool.first,
        isolation.pool.last,
        isolation.task_root,
    )
    return isolation


def run_worker(config: WorkerConfig, *, log_format: str | None = None, log_file: str | None = None) -> int:
    """Serve until SIGTERM/SIGINT; then kill every attempt and return 0.

    Logs go to stderr or ``log_file`` (rotated), as text or JSON lines; unset arguments fall back to
    ``IRIS_LOG_FORMAT`` / ``IRIS_LOG_FILE``. Raises WorkerConfigError (one sentence) when the
    address, state dir or log settings cannot be used.
    """
    if config.task_uids is not None:
        reexec_with_private_proc()  # once, before any thread: attempts are born with /proc hidden
    private_umask()  # logs, pid records, bundles: 0600 from birth (tasks get the usual 022)
    try:
        configure_logging(log_format, log_file)
    except (ValueError, OSError) as exc:
        raise WorkerConfigError(f"cannot set up logging: {exc}") from None
    if config.ready_file is not None:
        config.ready_file.unlink(missing_ok=True)  # a stale file from a killed run must not look ready
    raise_open_file_limit()
    sock = listen(config.host, config.port)
    port = sock.getsockname()[1]
    worker_id = config.worker_id or default_worker_id(port)
    address = f"{advertised_host(config.host)}:{port}"
    state_dir = config.state_dir or default_state_dir(worker_id)
    try:
        # 0700 and every file 0600 (an install from before is repaired); task work dirs and
        # environments keep the modes the runtime gives them.
        make_private(state_dir, keep=[state_dir / "tasks", state_dir / "work"])
    except OSError as exc:
        sock.close()
        raise WorkerConfigError(f"cannot create the state dir {state_dir}: {exc.strerror or exc}") from None
    inventory = resolve_devices(config.device, config.detect_devices, device_dir=config.device_dir)
    if inventory is not None:
        logger.info(
            "offering %d %s devices%s: indices %s",
            inventory.count,
            inventory.type,
            f" ({inventory.variant})" if inventory.variant else "",
            ",".join(str(i) for i in inventory.indices),
            extra={"worker_id": worker_id},
        )
    capacity = worker_capacity(config, state_dir, inventory.spec() if inventory is not None else None)
    attributes = {**device_attributes(inventory), **config.attributes}

    def register_request() -> RegisterRequest:
        return RegisterRequest(
            worker_id=worker_id,
            address=address,
            capacity=capacity,
            attributes=attributes,
            slice_id=config.slice_id,
            scale_group=config.scale_group,
        )

    token = os.environ.get("IRIS_TOKEN") or None  # a worker token when the controller requires one
    verifier = RequestVerifier()
    link = ControllerLink(
        config.controller_url,
        worker_id,
        register_request,
        config.reregister_after_s,
        token=token,
        verifier=verifier,
    )
    metrics: WorkerMetrics | None = None

    def attempt_changed(uid: str) -> None:
        """Runs on a runtime thread at every attempt change: one state lookup, no snapshot."""
        link.state_changed()
        if metrics is not None:
            known = runtime.state_of(uid)
            if known is not None and metrics.attempt_changed(uid, *known) is Phase.FINISHED:
                # Like the controller, not every success at INFO: a busy worker ends hundreds a
                # second, and the line cost a tenth of the worker's Python time.
                logger.log(
                    logging.DEBUG if known[0] is TaskState.SUCCEEDED else logging.INFO,
                    "attempt %s ended: %s",
                    uid,
                    known[0].value,
                    extra={"attempt_uid": uid, "worker_id": worker_id},
                )

    isolation = _isolation(config, state_dir)
    containers = ContainerTaskRuntime(
        worker_id,
        cli=config.container_cli,
        device_dir=str(config.device_dir) if config.device_dir else "/dev",
    )
    runtime = SubprocessRuntime(
        state_dir,
        worker_id=worker_id,
        controller_url=config.controller_url,
        on_change=attempt_changed,
        preparer=AttemptPreparer(
            state_dir,
            config.controller_url,
            token=token,
            envs_dir=isolation.task_root / "envs" if isolation is not None else None,
            isolation=isolation,
            bundle_max_bytes=config.bundle_max_bytes,
            bundle_max_entries=config.bundle_max_entries,
            containers=containers,
        ),
        isolation=isolation,
        devices=DeviceBroker(inventory) if inventory is not None else None,
        containers=containers,
    )
    if runtime.containers_removed:
        logger.warning("removed %d containers left by a previous run", len(runtime.containers_removed))
    if runtime.containers_adopted:
        logger.warning(
            "adopted %d containers a previous run left running: %s",
            len(runtime.containers_adopted),
            ", ".join(runtime.containers_adopted),
        )
        # They keep the fencing deadline they ran under: the previous run's last reconcile and grace.
        previous = read_heartbeat(state_dir / HEARTBEAT_FILE)
        if previous is not None:
            link.resume_lease(previous.reconciled_at, previous.fence_after_s)
    if runtime.leftovers_killed:
        logger.warning("killed %d attempts left running by a previous run", len(runtime.leftovers_killed))
    usage = UsageSampler(runtime.live_processes)
    shipper = LogShipper(
        config.controller_url,
        worker_id,
        runtime.attempts_dir,
        runtime.attempts_changed_since,
        usage=usage.usage,
        finished_log=runtime.take_finished_log,
        token=token,
    )
    heartbeat = Heartbeat(state_dir)
    fence = SelfFence(
        since_reconciled=link.since_reconciled,
        advised_grace=lambda: link.advised_fence_s,
        kill_all=runtime.kill_all,
        configured_grace_s=config.fence_after_s,
        heartbeat=heartbeat.beat,
    )
    link.on_reached = fence.check  # rewrites the heartbeat before a reconcile starts anything
    watchdog = start_watchdog(state_dir, worker_id)
    health = HealthCache(state_dir, runtime.running_count)
    service = WorkerService(worker_id, runtime, health, link)
    metrics = WorkerMetrics(running_attempts=runtime.running_count, health=health.current)
    server = uvicorn.Server(
        uvicorn.Config(
            create_app(service, verifier, metrics),
            log_config=None,  # uvicorn's loggers propagate to ours: --log-format applies to them too
            log_level="warning",
            access_log=False,
            lifespan="off",
            timeout_keep_alive=120,
            timeout_graceful_shutdown=2,
        )
    )

    def when_serving() -> None:
        while not server.started and not server.should_exit:
            time.sleep(0.01)
        if server.should_exit:
            return
        if config.ready_file is not None:
            write_ready_file(config.ready_file, worker_id, address)
        logger.info(
            "worker %s serving on %s (state in %s)",
            worker_id,
            address,
            state_dir,
            extra={"worker_id": worker_id},
        )
        link.start()
        usage.start()
        shipper.start()
        fence.start()

    # uvicorn re-raises the signal that stopped it once it is done; a no-op handler lets this
    # function finish its cleanup and return 0 instead of dying on the re-raised SIGTERM.
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: None)
    threading.Thread(target=when_serving, name="iris-worker-start", daemon=True).start()
    try:
        server.run(sockets=[sock])
    finally:
        link.stop()
        fence.stop()
        runtime.shutdown()
        usage.stop()
        shipper.stop()  # a last push of what the attempts wrote while being killed
        watchdog.terminate()
        try:
            watchdog.wait(timeout=2)
        except subprocess.TimeoutExpired:
            watchdog.kill()
        heartbeat.close()
        logger.info("worker %s stopped", worker_id, extra={"worker_id": worker_id})
        if config.ready_file is not None:
            config.ready_file.unlink(missing_ok=True)
    return 0
