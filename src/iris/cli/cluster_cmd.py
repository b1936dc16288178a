"""``iris cluster start|status``: run a local cluster in the foreground, or look at the current one."""

from __future__ import annotations

import errno
import os
import sys
import time
from pathlib import Path
from typing import Any

import click
from rich.text import Text

from iris.cli.context import (
    CliError,
    Ctx,
    check_quantities,
)
from iris.cli.output import (
    ago,
    clean,
    console,
    duration,
    err_console,
    line,
    output_option,
    print_data,
    styled,
    table,
)
from iris.cli.params import SIZE_MB
from iris.cli.progress import stop_signals_interrupt
from iris.cluster.controller.state_lock import holder_of, in_use_message


def _counts_line(label: str, counts: dict[str, int]) -> Text:
    out = Text(label)
    for i, (state, n) in enumerate(sorted(counts.items())):
        out.append(", " if i else "")
        out.append_text(styled(state))
        out.append(f" {n}")
    if not counts:
        out.append("none")
    return out


def _install_sigterm() -> None:
    stop_signals_interrupt()


@click.group()
def cluster() -> None:
    """Start a local cluster or look at the one you are connected to."""


def _build_control_plane() -> None:
    """Build the local control plane into the cache if it is not there yet, saying so."""
    from iris.testing.control_plane.binaries import MissingBinaries
    from iris.testing.control_plane.build import ensure_built

    try:
        ensure_built(lambda text: console.print(f"  {text}", markup=False, highlight=False))
    except MissingBinaries as exc:
        raise CliError(f"cannot start a local Kubernetes control plane: {exc}") from None


@cluster.command("start")
@click.option(
    "--local",
    "local",
    is_flag=True,
    help="Run controller and workers on this machine (the only mode for now).",
)
@click.option(
    "--workers", type=click.IntRange(0, 256), help="Worker daemons to start (default 2; 0 with --config)."
)
@click.option("--port", type=int, help="Controller port (default 10000; 0 picks a free one).")
@click.option("--state-dir", type=click.Path(path_type=Path), help="State directory (default ~/.iris/local).")
@click.option("--backend", type=click.Choice(["worker", "kubernetes"]), default="worker", show_default=True)
@click.option(
    "--worker-cpu",
    help="CPU capacity each worker advertises (default: this machine's cpus split among the workers).",
)
@click.option(
    "--worker-memory",
    type=SIZE_MB,
    help="Memory each worker advertises; a number is MB (default: this machine's memory split among the workers).",
)
@click.option(
    "--config",
    "config_path",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="Cluster config (YAML): its scale groups start and stop workers on demand.",
)
@click.option(
    "--kubeconfig",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="With --backend kubernetes: run against this cluster instead of a local control plane.",
)
@click.option(
    "--namespace",
    default="iris",
    show_default=True,
    help="With --kubeconfig: the namespace `iris k8s manifests` set up for Iris.",
)
@click.option(
    "--queue", default="iris", show_default=True, help="With --kubeconfig: the Kueue LocalQueue of task pods."
)
@click.option(
    "--real-node",
    type=click.Choice(["auto", "yes", "no"]),
    default="auto",
    show_default=True,
    help="With --backend kubernetes and no --kubeconfig: run pods on a real kubelet with containerd "
    "(yes), on node agents (no), or on the first when this machine allows it (auto: root, cgroups, "
    "containerd, runc and the CNI plugins).",
)
@click.option(
    "--no-auth",
    is_flag=True,
    help="Do not require the one-time token: any local user can then use the cluster (web pages "
    "still cannot: it takes writes only as JSON, and only under its own host names).",
)
def cluster_start(
    local: bool,
    workers: int | None,
    port: int | None,
    state_dir: Path | None,
    backend: str,
    worker_cpu: str | None,
    worker_memory: str | None,
    config_path: Path | None,
    kubeconfig: Path | None,
    namespace: str,
    queue: str,
    real_node: str,
    no_auth: bool,
) -> None:
    """Run a controller plus N worker daemons in the foreground; Ctrl-C stops them all.

    The controller requires a one-time token, printed in the dashboard's URL
    (http://127.0.0.1:PORT/?token=...) and as IRIS_TOKEN for the CLI; --no-auth turns that off.
    A --config decides auth itself (its tokens, or none).

    The workers share this machine's cpus and memory (unless --worker-cpu/--worker-memory say
    otherwise). A worker that exits is reported and started again (after 1s, doubling up to 60s
    while it keeps failing); the rest of the cluster keeps running. If the controller exits, the
    cluster stops and the command exits with code 1.

    With --config, the file's scale groups decide how many workers run (the autoscaler starts
    and stops them), and its controller section sets the port and state directory.

    With --backend kubernetes there are no workers: the controller runs tasks as pods, on a real
    local control plane (etcd, kube-apiserver, scheduler, controller-manager and Kueue from the
    cache of scripts/k8s-control-plane build, built first if missing) whose node is a real kubelet
    with containerd when this machine allows it (root; pods are containers of the local image
    iris-test/python:3.11 and reach nothing beyond their node but the controller, which listens
    also on the node's veth address, by token only), else node agents running pods as local
    process groups (--real-node says which), or with --kubeconfig in any cluster prepared with
    `iris k8s manifests | kubectl apply -f -`.
    """
    from iris.client.local_cluster import LocalCluster, machine_share

    if not local:
        raise click.UsageError(
            "only --local clusters can be started from here; on other machines run `iris controller start` and `iris worker start`"
        )
    check_quantities(worker_cpu, None)
    worker_memory = f"{worker_memory}B" if isinstance(worker_memory, int) else worker_memory
    if kubeconfig is not None and backend != "kubernetes":
        raise click.UsageError("--kubeconfig goes with --backend kubernetes")
    controller_args: list[str] = []
    token: str | None = None
    worker_token: str | None = None
    autoscaled = False
    if config_path is not None:
        from iris.cluster.config import load_cluster_config

        config = load_cluster_config(config_path)  # errors name the key and the line
        controller_args = ["--config", str(config_path.resolve())]
        port = config.controller.port if port is None else port
        state_dir = Path(config.controller.state_dir).expanduser() if state_dir is None else state_dir
        backend = "kubernetes" if config.backend.kind == "kubernetes" else backend
        workers = 0 if workers is None else workers
        autoscaled = bool(config.scale_groups)
        # With auth on, the launcher checks in as an admin (or $IRIS_TOKEN) and its workers as a worker.
        admin = next((t.token for t in config.auth.tokens if t.role == "admin"), None)
        token = os.environ.get("IRIS_TOKEN") or admin
        worker_token = next((t.token for t in config.auth.tokens if t.role == "worker"), None)
    num_workers = 2 if workers is None else workers
    if num_workers and (worker_cpu is None or worker_memory is None):
        share_cpu, share_memory = machine_share(num_workers)
        worker_cpu = worker_cpu or share_cpu
        worker_memory = worker_memory or share_memory
    listen_port = 10000 if port is None else port
    cluster_dir = state_dir or Path.home() / ".iris" / "local"
    holder = holder_of(Path(cluster_dir) / "controller")
    if holder is not None:
        raise CliError(in_use_message(Path(cluster_dir).expanduser() / "controller", holder))
    _check_port_free("127.0.0.1", listen_port)
    lc = LocalCluster(
        workers=num_workers,
        state_dir=cluster_dir,
        port=listen_port,
        backend=backend,
        worker_cpu=worker_cpu,
        worker_memory=worker_memory,
        controller_args=controller_args,
        token=token,
        worker_token=worker_token,
        kubeconfig=kubeconfig,
        namespace=namespace,
        local_queue=queue,
        # A --config says itself whether there is auth (its autoscaled workers use its tokens).
        one_time_token=not no_auth and config_path is None,
        real_node=real_node,
    )
    if backend == "kubernetes" and kubeconfig is None:
        _build_control_plane()
    _install_sigterm()
    try:
        lc.start()
        console.print(line(("Iris local cluster", "bold"), f" ({backend} backend) is up"))
        console.print(f"  controller: {lc.url}")
        console.print(f"  dashboard:  {lc.dashboard_url}")
        if backend == "worker":
            console.print(
                f"  workers:    {lc.num_workers}"
                + (" (plus what the autoscaler starts)" if autoscaled else "")
            )
        if "k8s_nodes" in lc.ready_info:
            nodes = ", ".join(str(n) for n in lc.ready_info["k8s_nodes"])  # type: ignore[attr-defined]
            console.print(
                f"  kubernetes: real control plane at {lc.ready_info['k8s_server_url']} (with Kueue)"
            )
            console.print(f"  nodes:      {nodes} ({lc.ready_info['k8s_runtime']})")
            if lc.ready_info.get("pod_controller_url"):
                console.print(
                    f"  pods reach: {lc.ready_info['pod_controller_url']} (the node's veth; by token only)"
                )
            elif lc.ready_info.get("k8s_real_node"):
                console.print(
                    "  pods reach: nothing (--no-auth: the controller stays on loopback, so workspace"
                    " bundles, callables and gangs fail on the real node; submit with --no-workspace)"
                )
        if "kubeconfig" in lc.ready_info:
            kubectl_config = lc.ready_info.get("admin_kubeconfig") or lc.ready_info["kubeconfig"]
            console.print(f"  kubeconfig: {kubectl_config}")
            console.print(f"     kubectl --kubeconfig {kubectl_config} get pods -l iris.managed=true")
        console.print(f"  logs:       {lc.state_dir / 'logs'}")
        exports = f"  export IRIS_CONTROLLER_URL={lc.url}"
        if lc.token is not None and token is None:  # the one-time token: the CLI needs it too
            exports += f"\n  export IRIS_TOKEN={lc.token}"
        console.print(f"\n{exports}\n\nPress Ctrl-C to stop.")
        sys.stdout.flush()
        code = _supervise(lc)
    except KeyboardInterrupt:
        err_console.print("stopping...")
        code = 0
    finally:
        lc.stop()
    sys.exit(code)


# A worker that exits is started again after this many seconds, doubling up to the maximum while
# it keeps failing; one that stayed up this long starts again from the first delay.
RESTART_DELAYS_S = (1.0, 60.0)
STABLE_AFTER_S = 60.0


def _supervise(lc: Any) -> int:
    """Watch the cluster's processes until the controller exits (returns 1) or Ctrl-C.

    A worker that exits is reported and restarted with backoff; the others keep running.
    """
    first, most = RESTART_DELAYS_S
    delay: dict[str, float] = {}
    restart_at: dict[str, float] = {}
    started: dict[str, float] = {w.name: time.monotonic() for w in lc.workers}
    while True:
        controller = lc.controller
        if controller is not None and controller.proc.poll() is not None:
            err_console.print(
                line(
                    ("the controller exited", "red"),
                    f" with code {controller.proc.returncode}; stopping the cluster (see {controller.log_path})",
                )
            )
            return 1
        now = time.monotonic()
        for child in list(lc.workers):
            if child.proc.poll() is None:
                if now - started.get(child.name, now) > STABLE_AFTER_S:
                    delay.pop(child.name, None)
                continue
            if child.name not in restart_at:
                wait = delay.get(child.name, first)
                restart_at[child.name] = now + wait
                err_console.print(
                    line(
                        (f"{child.name} exited with code {child.proc.returncode}", "yellow"),
                        f"; restarting it in {wait:g}s (log: {child.log_path})",
                    )
                )
            elif now >= restart_at[child.name]:
                restart_at.pop(child.name)
                delay[child.name] = min(most, delay.get(child.name, first) * 2)
                lc.restart_worker(child.name, wait=False)
                started[child.name] = time.monotonic()
                err_console.print(line(f"{child.name} restarted"))
        time.sleep(0.2)


def _check_port_free(host: str, port: int) -> None:
    """One sentence, before anything starts, when another process listens on the port."""
    import socket

    if port == 0:
        return
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as exc:
            reason = "is in use" if exc.errno == errno.EADDRINUSE else f"cannot be used ({exc.strerror})"
            raise CliError(
                f"port {port} on {host} {reason}; choose another with --port (0 picks a free one)"
            ) from None


@cluster.command("status")
@output_option
@click.pass_obj
def cluster_status(obj: Ctx, fmt: str) -> None:
    """Backend descriptor, dashboard capabilities and counts."""
    with obj.client() as client:
        status = client.cluster_status()
    if fmt in ("json", "yaml"):
        print_data(status, fmt)
        return
    console.print(
        line(
            (clean(status.display_name), "bold"),
            f"  kind={status.kind}  id={status.backend_id}  version={status.version}",
        )
    )
    console.print(line(f"capabilities: {', '.join(status.capabilities)}"))
    console.print(
        f"uptime: {duration(time.time() - status.uptime_s, None)}   dashboard: {status.dashboard_url}"
    )
    console.print(_counts_line("jobs:    ", status.jobs_by_state))
    console.print(_counts_line("tasks:   ", status.tasks_by_state))
    if status.kind == "worker-daemon":
        console.print(_counts_line("workers: ", status.workers_by_status))
    if "autoscaler" in status.capabilities:
        with obj.client() as client:
            view = client.http.request("GET", "/api/v1/autoscaler")
        t = table(
            "GROUP", "READY", "BOOTING", "FAILED", "DEMAND", "TARGET", "MIN-MAX", "STATUS", "LAST ACTION"
        )
        for g in view["groups"]:
            by_state = g.get("slices_by_state", {})
            last = g.get("last_action") or {}
            last_text = (
                f"{last.get('action', '')} {last.get('slice_id') or ''}: {last.get('reason', '')}"
                if last
                else "-"
            )
            t.add_row(
                g["name"],
                str(by_state.get("READY", 0)),
                str(by_state.get("BOOTING", 0) + by_state.get("CREATING", 0)),
                str(by_state.get("FAILED", 0)),
                f"{g.get('demand_tasks', 0)} task(s)",
                str(g.get("target", 0)),
                f"{g.get('min_slices', 0)}-{g.get('max_slices', 0)}",
                g.get("status", ""),
                last_text,
            )
        console.print()
        console.print(t)
        recent = view.get("actions", [])[-8:]
        if recent:
            console.print()
            console.print(line(("recent scaling actions", "bold")))
            for a in recent:
                console.print(
                    line(
                        f"  {ago(a['ts']):>8}  {a['group']}  {a['action']} {a.get('slice_id') or ''}: {a.get('reason', '')}"
                    )
                )
