"""The `iris` command: run jobs, watch them, and operate clusters."""

from __future__ import annotations

import errno
import os
import re
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import click
from pydantic import ValidationError
from rich.console import Group
from rich.text import Text

from iris.cli.completion import completion
from iris.cli.job_options import (
    did_you_mean,
    tpu_request,
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
    print_json,
    resources_text,
    styled,
    table,
)
from iris.cli.output import watch as watch_output
from iris.cli.params import CONSTRAINT, DEVICE, DURATION, GPU, SIZE_MB, TPU
from iris.cli.progress import follow_job, stop_signals_interrupt
from iris.cli.validation import validation_sentence
from iris.rpc.enums import TERMINAL_JOB_STATES, JobState, TaskState
from iris.rpc.errors import IrisError
from iris.rpc.units import format_bytes, parse_bytes, parse_cpu_millicores

DEFAULT_CONTROLLER = "http://127.0.0.1:10000"


class Ctx:
    def __init__(self, controller: str | None) -> None:
        self.controller_flag = controller

    @property
    def controller(self) -> str:
        if self.controller_flag:
            return check_url(self.controller_flag, "--controller")
        env = os.environ.get("IRIS_CONTROLLER_URL")
        return check_url(env, "$IRIS_CONTROLLER_URL") if env else DEFAULT_CONTROLLER

    def client(self) -> Any:
        from iris.client import IrisClient

        return IrisClient(self.controller, token=os.environ.get("IRIS_TOKEN"))


def check_url(url: str, where: str) -> str:
    """An http(s) URL with a host, or a UsageError that says what is wrong with it."""
    from urllib.parse import urlsplit

    text = url.strip()
    if "://" not in text:
        raise click.UsageError(f"{where} {url!r} has no scheme; write http://{text}")
    parts = urlsplit(text)
    if parts.scheme not in ("http", "https"):
        raise click.UsageError(f"{where} {url!r} must start with http:// or https://, not {parts.scheme}://")
    try:
        parts.port  # noqa: B018 - raises on a port that is not a number
    except ValueError:
        raise click.UsageError(f"{where} {url!r} has a port that is not a number") from None
    if not parts.hostname:
        raise click.UsageError(f"{where} {url!r} names no host")
    return text.rstrip("/")


def _controller_option(ctx: click.Context, _param: click.Parameter, value: str | None) -> None:
    """``--controller`` given after the subcommand: the same as before it."""
    if value:
        root = ctx.find_object(Ctx)
        if root is not None:
            root.controller_flag = value


def _accept_controller_everywhere(group: click.Group) -> None:
    for command in group.commands.values():
        if isinstance(command, click.Group):
            _accept_controller_everywhere(command)
        elif not any(p.name == "controller" for p in command.params):
            command.params.append(
                click.Option(
                    ["--controller"],
                    metavar="URL",
                    expose_value=False,
                    callback=_controller_option,
                    help="Controller URL (as before the subcommand).",
                )
            )


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.option(
    "--controller",
    metavar="URL",
    help="Controller URL (default: $IRIS_CONTROLLER_URL or http://127.0.0.1:10000).",
)
@click.version_option(package_name="iris", prog_name="iris")
@click.pass_context
def cli(ctx: click.Context, controller: str | None) -> None:
    """Iris: submit batch and ML jobs, watch them run, and operate the cluster.

    \b
    Quick start:
      iris job run --local -- echo hello      run one job on an embedded cluster
      iris cluster start --local --workers 2  run a local cluster in the foreground
      iris job run -- python train.py         submit to the cluster at $IRIS_CONTROLLER_URL
    """
    ctx.obj = Ctx(controller)


# ---------------------------------------------------------------- controller


@cli.group()
def controller() -> None:
    """Run the controller process."""


@controller.command("start")
@click.option(
    "--host",
    default="127.0.0.1",
    show_default=True,
    help="Address to listen on (0.0.0.0 for other machines).",
)
@click.option("--port", default=10000, show_default=True, type=int)
@click.option(
    "--state-dir",
    type=click.Path(path_type=Path),
    default=Path.home() / ".iris" / "controller",
    show_default=True,
    help="Where the SQLite database lives.",
)
@click.option("--backend", type=click.Choice(["worker", "kubernetes"]), default="worker", show_default=True)
@click.option(
    "--kubeconfig",
    type=click.Path(),
    help="Kubernetes backend: kubeconfig file (default: in-cluster config).",
)
@click.option(
    "--namespace", default="iris", show_default=True, help="Kubernetes backend: namespace for pods."
)
@click.option("--queue", default="iris", show_default=True, help="Kubernetes backend: Kueue LocalQueue name.")
@click.option(
    "--tick", default=1.0, show_default=True, type=float, help="Safety-net tick of the control loop, seconds."
)
@click.option(
    "--worker-grace",
    default=60.0,
    show_default=True,
    type=float,
    help="Seconds a silent worker keeps its tasks (its attempts fence themselves a little earlier).",
)
@click.option(
    "--advertise-url", help="URL tasks and workers use to reach the controller (default: the listen address)."
)
@click.option("--image", help="Kubernetes backend: container image for task pods.")
@click.option(
    "--config",
    "config_path",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="Cluster config (YAML); its scale groups enable the autoscaler.",
)
@click.option(
    "--log-format",
    type=click.Choice(["text", "json"]),
    help="Log lines as text (default) or one JSON object per line (default: $IRIS_LOG_FORMAT).",
)
@click.option(
    "--log-file",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Log to this file, rotated at 20 MB with 5 kept, instead of stderr (default: $IRIS_LOG_FILE).",
)
def controller_start(
    host: str,
    port: int,
    state_dir: Path,
    backend: str,
    kubeconfig: str | None,
    namespace: str,
    queue: str,
    tick: float,
    worker_grace: float,
    advertise_url: str | None,
    image: str | None,
    config_path: Path | None,
    log_format: str | None,
    log_file: Path | None,
) -> None:
    """Run the controller alone; workers on other machines join with `iris worker start --controller URL`."""
    from iris.cluster.controller.main import ControllerOptions, run

    options = ControllerOptions(
        host=host,
        port=port,
        state_dir=state_dir,
        backend=backend,
        kubeconfig=kubeconfig,
        namespace=namespace,
        queue=queue,
        tick=tick,
        worker_grace=worker_grace,
        advertise_url=advertise_url,
        image=image,
        config=config_path,
        log_format=log_format,
        log_file=log_file,
    )
    err_console.print(f"controller starting on http://{host}:{port} (state in {state_dir})")
    try:
        run(options)
    except OSError as exc:
        raise click.ClickException(f"cannot listen on {host}:{port}: {exc.strerror}") from None


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


def _bytes_waiting(fd: int) -> int:
    import array
    import fcntl
    import termios

    buf = array.array("i", [0])
    try:
        fcntl.ioctl(fd, termios.FIONREAD, buf)
    except OSError:
        return 0
    return buf[0]


def _say_stdin_is_not_passed() -> None:
    """Standard input does not reach a job; say so when something was piped or redirected in."""
    import stat

    try:
        fd = sys.stdin.fileno()
        info = os.fstat(fd)
    except (OSError, ValueError, AttributeError):
        return
    if stat.S_ISREG(info.st_mode):
        waiting = info.st_size > 0
    elif stat.S_ISFIFO(info.st_mode):
        waiting = _bytes_waiting(fd) > 0  # an idle inherited pipe is not input
    else:
        return
    if waiting:
        err_console.print(
            line(
                (
                    "note: standard input is not passed to the job; put input in a file in the "
                    "workspace (the current directory) and read it from there",
                    "yellow",
                )
            )
        )


# ---------------------------------------------------------------- cluster


@cli.group()
def cluster() -> None:
    """Start a local cluster or look at the one you are connected to."""


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
    help="With --backend kubernetes: run against this cluster instead of the local sandbox.",
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
) -> None:
    """Run a controller plus N worker daemons in the foreground; Ctrl-C stops them all.

    The workers share this machine's cpus and memory (unless --worker-cpu/--worker-memory say
    otherwise). A worker that exits is reported and started again (after 1s, doubling up to 60s
    while it keeps failing); the rest of the cluster keeps running. If the controller exits, the
    cluster stops and the command exits with code 1.

    With --config, the file's scale groups decide how many workers run (the autoscaler starts
    and stops them), and its controller section sets the port and state directory.

    With --backend kubernetes there are no workers: the controller runs tasks as pods, in a local
    sandbox (a fake API server with Kueue and kubelet simulators), or with --kubeconfig in any
    real cluster prepared with `iris k8s manifests | kubectl apply -f -`.
    """
    from iris.client.local_cluster import LocalCluster, machine_share

    if not local:
        raise click.UsageError(
            "only --local clusters can be started from here; on other machines run `iris controller start` and `iris worker start`"
        )
    _check_quantities(worker_cpu, None)
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
    _check_port_free("127.0.0.1", listen_port)
    lc = LocalCluster(
        workers=num_workers,
        state_dir=state_dir or Path.home() / ".iris" / "local",
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
    )
    _install_sigterm()
    try:
        lc.start()
        console.print(line(("Iris local cluster", "bold"), f" ({backend} backend) is up"))
        console.print(f"  controller: {lc.url}")
        console.print(f"  dashboard:  {lc.url}/")
        if backend == "worker":
            console.print(
                f"  workers:    {lc.num_workers}"
                + (" (plus what the autoscaler starts)" if autoscaled else "")
            )
        if "kubeconfig" in lc.ready_info:
            console.print(f"  kubeconfig: {lc.ready_info['kubeconfig']}")
            console.print(
                f"     kubectl --kubeconfig {lc.ready_info['kubeconfig']} get pods -l iris.managed=true"
            )
        console.print(f"  logs:       {lc.state_dir / 'logs'}")
        console.print(f"\n  export IRIS_CONTROLLER_URL={lc.url}\n\nPress Ctrl-C to stop.")
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


# ---------------------------------------------------------------- jobs


@cli.group()
def job() -> None:
    """Run, list, inspect, follow and stop jobs."""


def _parse_env(values: Sequence[str]) -> dict[str, str]:
    env = {}
    for item in values:
        if "=" not in item or item.startswith("="):
            raise click.BadParameter(f"expected KEY=VALUE, got {item!r}", param_hint="--env")
        key, value = item.split("=", 1)
        env[key] = value
    return env


def _check_quantities(cpu: str | None, memory: str | None, disk: str | None = None) -> None:
    try:
        if cpu is not None:
            parse_cpu_millicores(cpu)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--cpu") from None
    for value, hint in ((memory, "--memory"), (disk, "--disk")):
        try:
            if value is not None:
                parse_bytes(value)
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint=hint) from None


def complete_job_id(ctx: click.Context, _param: click.Parameter, incomplete: str) -> list[Any]:
    """Shell completion of job ids (and bare names of the newest jobs) from the controller."""
    from click.shell_completion import CompletionItem

    root = ctx.find_root()
    url = root.params.get("controller") or os.environ.get("IRIS_CONTROLLER_URL") or DEFAULT_CONTROLLER
    try:
        from iris.client import IrisClient

        with IrisClient(check_url(url, "--controller"), token=os.environ.get("IRIS_TOKEN")) as client:
            jobs = client.list_jobs(limit=200).jobs
    except Exception:  # completion must never break the shell: no controller, no completions
        return []
    if incomplete.startswith("/"):
        return [CompletionItem(j.job_id) for j in jobs if j.job_id.startswith(incomplete)]
    from iris.client.client import default_user

    me = default_user()
    names = [
        j.name for j in jobs if j.user == me and j.parent_job_id is None and j.name.startswith(incomplete)
    ]
    ids = [j.job_id[1:] for j in jobs if "/" in incomplete and j.job_id[1:].startswith(incomplete)]
    return [CompletionItem(v) for v in dict.fromkeys(names + ids)]


@job.command("run", context_settings={"ignore_unknown_options": False})
@click.option(
    "--local", "local", is_flag=True, help="Start an embedded cluster for this one job, then stop it."
)
@click.option(
    "--workers",
    default=1,
    show_default=True,
    type=click.IntRange(1, 64),
    help="With --local: worker daemons to start.",
)
@click.option("--name", help="Job name (default: derived from the command).")
@click.option("--cpu", default="1", show_default=True, help="CPU per task (cores: 1, 0.5 or 500m).")
@click.option(
    "--memory",
    default="512",
    show_default=True,
    type=SIZE_MB,
    help="Memory per task: a number is MB (as in Slurm); or 4GB, 2Gi, 512B for bytes.",
)
@click.option("--disk", type=SIZE_MB, help="Disk per task (a number is MB, like --memory).")
@click.option("--gpu", "gpu", type=GPU, metavar="[TYPE:]N", help="GPUs per task: 2, or a100:2 for a model.")
@click.option(
    "--tpu",
    "tpu",
    type=TPU,
    metavar="TYPE[-TOPOLOGY]",
    help="A TPU host per task, e.g. v5litepod-8, v6e-16 or v4-2x2x1; a multi-host slice runs one task "
    "per host as a gang (unless --replicas is given).",
)
@click.option(
    "--device",
    "device",
    type=DEVICE,
    metavar="TYPE[:VARIANT][:N]",
    help="Any accelerator per task, as workers advertise it: gpu:h100:8, tpu:v5litepod-8:8.",
)
@click.option(
    "--constraint",
    "constraints",
    multiple=True,
    type=CONSTRAINT,
    metavar="EXPR",
    help="Run only on workers whose attributes match: KEY=VALUE, KEY!=VALUE, 'KEY in (a,b)', "
    "KEY>=N (or >, <, <=), KEY (exists), !KEY (missing). Repeatable; all must hold.",
)
@click.option(
    "--prefer",
    "preferences",
    multiple=True,
    type=CONSTRAINT,
    metavar="EXPR",
    help="Like --constraint, but soft: workers matching more preferences are chosen first; "
    "never makes the job wait. Repeatable.",
)
@click.option(
    "--zone", help="Only workers with attribute zone=ZONE (checked against what workers advertise)."
)
@click.option("--region", help="Only workers with attribute region=REGION (checked like --zone).")
@click.option(
    "--group-by",
    metavar="ATTR",
    help="Gang: place all tasks at once on workers sharing one value of attribute ATTR.",
)
@click.option(
    "--port",
    "ports",
    multiple=True,
    metavar="NAME",
    help="A named port to allocate per task ($IRIS_PORT_<NAME> in the task). Repeatable.",
)
@click.option(
    "--env", "env", multiple=True, metavar="KEY=VALUE", help="Environment variable for the task (repeatable)."
)
@click.option(
    "--replicas", default=1, show_default=True, type=click.IntRange(1, 100_000), help="Number of tasks."
)
@click.option(
    "--max-retries",
    default=0,
    show_default=True,
    type=click.IntRange(0, 10_000),
    help="Retries after the command fails.",
)
@click.option(
    "--max-preemptions",
    default=100,
    show_default=True,
    type=click.IntRange(0, 100_000),
    help="Retries after losing a worker or being preempted.",
)
@click.option(
    "--timeout",
    type=DURATION,
    metavar="DURATION",
    help="Execution timeout per task (no retry): 90 or 90s, 30m, 1h, 1:00:00.",
)
@click.option(
    "--scheduling-timeout",
    type=DURATION,
    metavar="DURATION",
    help="Give up (UNSCHEDULABLE) if not placed within this long (like --timeout).",
)
@click.option(
    "--priority",
    type=click.Choice(["production", "interactive", "batch"], case_sensitive=False),
    default="interactive",
    show_default=True,
)
@click.option(
    "--dry-run", is_flag=True, help="Say whether and where the job would place now; submit nothing."
)
@click.option(
    "--wait-for-capacity",
    is_flag=True,
    help="Queue the job even if no worker or scale group could run it now (workers that fit will join).",
)
@click.option(
    "--replace",
    is_flag=True,
    help="Replace a finished job of the same --name (its tasks, logs and events go); a running one is never replaced.",
)
@click.option("--no-wait", is_flag=True, help="Submit, print the job id and return.")
@click.option("--json", "as_json", is_flag=True, help="With --no-wait: print the job id as JSON.")
@click.option(
    "--no-workspace",
    is_flag=True,
    help="Do not package the current directory (by default the task runs in a copy of it).",
)
@click.option(
    "--pip",
    "pip_packages",
    multiple=True,
    metavar="PKG",
    help="Install PKG in the task's environment (repeatable).",
)
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
@click.pass_context
def job_run(
    ctx: click.Context,
    local: bool,
    workers: int,
    name: str | None,
    cpu: str,
    memory: int,
    disk: int | None,
    gpu: Any,
    tpu: str | None,
    device: Any,
    constraints: Sequence[Any],
    preferences: Sequence[Any],
    zone: str | None,
    region: str | None,
    group_by: str | None,
    ports: Sequence[str],
    env: Sequence[str],
    replicas: int,
    max_retries: int,
    max_preemptions: int,
    timeout: float | None,
    scheduling_timeout: float | None,
    priority: str,
    dry_run: bool,
    wait_for_capacity: bool,
    replace: bool,
    no_wait: bool,
    as_json: bool,
    no_workspace: bool,
    pip_packages: Sequence[str],
    command: Sequence[str],
) -> None:
    """Run COMMAND as a job, stream its output and exit with its exit code.

    Ctrl-C, SIGTERM or SIGHUP stop the job (a second one within 2s detaches instead). Standard
    input is not passed to the job: put input in a file in the workspace.

    \b
    Examples:
      iris job run --local -- echo hello
      iris job run --cpu 2 --memory 4GB --replicas 4 -- python train.py --epochs 3
      iris job run --gpu a100:2 --constraint 'zone in (a,b)' --timeout 2h -- python train.py
      iris job run --tpu v5litepod-16 -- python train_jax.py
      iris job run --replicas 4 --group-by rack --port coord -- python dist.py
    """
    from iris.client import CoschedulingConfig, Entrypoint, EnvironmentSpec, ResourceSpec
    from iris.cluster.types import JobName

    obj: Ctx = ctx.obj
    if not command or not command[0].strip():
        raise click.UsageError("the command is empty: put it after --, e.g. iris job run -- echo hello")
    for i, arg in enumerate(command):
        if any("\udc80" <= ch <= "\udcff" for ch in arg):
            raise click.UsageError(
                f"argument {i + 1} of the command ({clean(arg)!r}) is not valid UTF-8; Iris carries commands as text"
            )
    if sum(x is not None for x in (gpu, tpu, device)) > 1:
        raise click.UsageError("give one of --gpu, --tpu and --device")
    if name is not None:
        try:
            JobName.check_component(name)
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint="--name") from None
    for port in ports:
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_-]{0,63}", port):
            raise click.BadParameter(
                f"{port!r} is not a port name; use letters, digits, _ and - (the task reads $IRIS_PORT_<NAME>)",
                param_hint="--port",
            )
    _check_quantities(cpu, None)
    res_kwargs: dict[str, Any] = {"cpu": cpu, "memory_bytes": memory, "device": gpu or device}
    if disk:
        res_kwargs["disk_bytes"] = disk
    replicas_given = ctx.get_parameter_source("replicas") is not click.core.ParameterSource.DEFAULT
    submit_kwargs = dict(
        name=name,
        resources=_one_line_validation(lambda: ResourceSpec(**res_kwargs)),
        replicas=replicas,
        env=_parse_env(env),
        constraints=list(constraints),
        preferences=list(preferences),
        coscheduling=CoschedulingConfig(group_by=group_by) if group_by else None,
        ports=list(ports),
        max_retries_failure=max_retries,
        max_retries_preemption=max_preemptions,
        timeout=timeout,
        scheduling_timeout=scheduling_timeout,
        priority=priority,
        wait_for_capacity=wait_for_capacity,
        replace=replace,
    )
    if pip_packages:
        submit_kwargs["environment"] = EnvironmentSpec(pip_packages=list(pip_packages))
    request = ClusterRequest(zone=zone, region=region, tpu=tpu, replicas_given=replicas_given)
    workspace = None if no_workspace else Path.cwd()
    entrypoint = Entrypoint.from_command(*command)
    if not dry_run:
        _say_stdin_is_not_passed()
        stop_signals_interrupt()  # SIGTERM and SIGHUP act as Ctrl-C
    if dry_run:
        if local:
            raise click.UsageError("--dry-run asks a running cluster; it cannot be combined with --local")
        with obj.client() as client:
            request.apply(client, submit_kwargs)
            result = client.dry_run(entrypoint, **submit_kwargs)
        if as_json:
            print_json(result)
        else:
            console.print(line(result.summary))
            for p in result.placements:
                console.print(line(f"  task {p['task_id'].rsplit('/', 1)[-1]} -> {p['worker_id']}"))
        sys.exit(0 if result.would_place else 1)
    if local:
        from iris.client import IrisClient

        err_console.print(line(("starting a local cluster...", "dim")))
        from iris.client.local_cluster import machine_share

        share_cpu, share_memory = machine_share(workers)
        with IrisClient.local(
            workers=workers, port=0, worker_cpu=share_cpu, worker_memory=share_memory
        ) as client:
            code = _run_and_follow(
                client, entrypoint, submit_kwargs, request, no_wait=False, as_json=as_json, detach_ok=False,
                workspace=workspace,
            )  # fmt: skip
    else:
        with obj.client() as client:
            code = _run_and_follow(
                client, entrypoint, submit_kwargs, request, no_wait=no_wait, as_json=as_json, detach_ok=True,
                workspace=workspace,
            )  # fmt: skip
    sys.exit(code)


class ClusterRequest:
    """The options that are checked against the cluster's workers before submitting."""

    def __init__(
        self, *, zone: str | None, region: str | None, tpu: str | None, replicas_given: bool
    ) -> None:
        self.zone = zone
        self.region = region
        self.tpu = tpu
        self.replicas_given = replicas_given

    def apply(self, client: Any, submit_kwargs: dict[str, Any]) -> None:
        """Add the zone/region constraints and the TPU device (and gang) to ``submit_kwargs``."""
        from iris.client import Constraint, CoschedulingConfig

        if self.zone is None and self.region is None and self.tpu is None:
            return
        offers = _attribute_offers(client)
        for key, value in (("zone", self.zone), ("region", self.region)):
            if value is None:
                continue
            known = {attrs[key] for _, attrs in offers if key in attrs}
            if value not in known:
                hint = did_you_mean(value, known) if known else f"; no worker advertises a {key}"
                raise click.BadParameter(f"no worker is in {key} {value!r}{hint}", param_hint=f"--{key}")
            submit_kwargs["constraints"].append(Constraint(key=key, value=value))
        if self.tpu is not None:
            try:
                tpu = tpu_request(self.tpu, offers)
            except ValueError as exc:
                raise click.BadParameter(str(exc), param_hint="--tpu") from None
            submit_kwargs["resources"].device = tpu.device
            submit_kwargs["constraints"].extend(tpu.constraints)
            if tpu.hosts > 1 and not self.replicas_given:
                submit_kwargs["replicas"] = tpu.hosts
                if submit_kwargs["coscheduling"] is None:
                    submit_kwargs["coscheduling"] = CoschedulingConfig(group_by="tpu-slice")


def _attribute_offers(client: Any) -> list[tuple[Any, dict[str, str]]]:
    """(device, attributes) of every registered worker and of every scale group's workers-to-be."""
    offers = [(w.capacity.device, dict(w.attributes)) for w in client.workers().workers]
    try:
        view = client.http.request("GET", "/api/v1/autoscaler")
    except IrisError:
        return offers
    from iris.client import DeviceSpec

    for group in view.get("groups", []) if isinstance(view, dict) else []:
        attrs = {str(k): str(v) for k, v in (group.get("attributes") or {}).items()}
        resources = group.get("resources") if isinstance(group.get("resources"), dict) else {}
        device = resources.get("device")
        offers.append((DeviceSpec.model_validate(device) if isinstance(device, dict) else None, attrs))
    return offers


def _one_line_validation(build: Callable[[], Any]) -> Any:
    try:
        return build()
    except ValidationError as exc:
        raise click.UsageError(validation_sentence(exc)) from None


def _run_and_follow(
    client: Any,
    entrypoint: Any,
    submit_kwargs: dict[str, Any],
    request: ClusterRequest,
    *,
    no_wait: bool,
    as_json: bool,
    detach_ok: bool,
    workspace: Path | None = None,
) -> int:
    # Everything that can be checked is checked before the workspace is packaged and uploaded.
    request.apply(client, submit_kwargs)
    _one_line_validation(lambda: client.build_spec(entrypoint, **submit_kwargs))
    bundle_id = None
    if workspace is not None:
        bundle, uploaded = client.upload_workspace(workspace)
        bundle_id = bundle.bundle_id
        how = "uploaded" if uploaded else "already on the controller"
        err_console.print(
            line(
                (
                    f"workspace {clean(workspace)}: {bundle.file_count} files, {len(bundle.data)} bytes, "
                    f"bundle {bundle_id[:12]} {how}",
                    "dim",
                )
            )
        )
    job = client.submit(entrypoint, bundle_id=bundle_id, **submit_kwargs)
    if no_wait:
        if as_json:
            print_json({"job_id": job.job_id})
        else:
            console.print(line(job.job_id))
        return 0
    # Job id and dashboard link first, then the output (with a live status on a terminal);
    # Ctrl-C stops the job, a second Ctrl-C detaches (see cli/progress.py).
    multi = submit_kwargs.get("replicas", 1) > 1
    # An embedded --local cluster stops with the job: a dashboard link would be dead at once.
    return follow_job(
        job, controller_url=client.url, multi=multi, detach_ok=detach_ok, show_dashboard=detach_ok
    )


_SORT_COLUMNS = {
    "submitted": ("submitted_at", True),
    "finished": ("finished_at", True),
    "name": ("job_id", False),
    "state": ("state", False),
    "user": ("user", False),
    "priority": ("priority", False),
}
JOB_STATES = [s.value for s in JobState]


def _check_states(values: Sequence[str]) -> list[str]:
    states = [s.strip().upper() for v in values for s in v.split(",") if s.strip()]
    for s in states:
        if s not in JOB_STATES:
            raise click.BadParameter(
                f"unknown state {s.lower()!r}; choose from {', '.join(x.lower() for x in JOB_STATES)}",
                param_hint="--state",
            )
    return states


watch_interval_option = click.option(
    "--interval",
    default=2.0,
    show_default=True,
    type=click.FloatRange(0.1, 3600),
    metavar="SECONDS",
    help="With --watch: seconds between refreshes.",
)


@job.command("list")
@click.option(
    "--state",
    "states",
    multiple=True,
    metavar="STATE",
    help="Only jobs in this state (repeatable, or comma-separated): "
    + ", ".join(s.lower() for s in JOB_STATES),
)
@click.option("--user", help="Only this user's jobs.")
@click.option("--name", "name", metavar="TEXT", help="Only jobs whose id contains TEXT.")
@click.option(
    "--since", metavar="WHEN", help="Only jobs submitted in the last 5m, 1h, 2d..., or since a time."
)
@click.option(
    "--sort",
    type=click.Choice(sorted(_SORT_COLUMNS), case_sensitive=False),
    default="submitted",
    show_default=True,
    help="Order: times newest first, the others A to Z.",
)
@click.option("--reverse", is_flag=True, help="Reverse the order.")
@click.option("--limit", default=50, show_default=True, type=click.IntRange(1, 1000))
@click.option(
    "--offset", default=0, show_default=True, type=click.IntRange(min=0), help="Skip this many jobs."
)
@watch_interval_option
@click.option("-w", "--watch", is_flag=True, help="Keep showing the list as it changes (Ctrl-C ends).")
@output_option
@click.pass_obj
def job_list(
    obj: Ctx,
    states: Sequence[str],
    user: str | None,
    name: str | None,
    since: str | None,
    sort: str,
    reverse: bool,
    limit: int,
    offset: int,
    interval: float,
    watch: bool,
    fmt: str,
) -> None:
    """List jobs, newest first."""
    wanted = _check_states(states)
    try:
        since_ts = parse_since(since, time.time()) if since else None
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--since") from None
    column, descending = _SORT_COLUMNS[sort.lower()]
    with obj.client() as client:

        def fetch() -> Any:
            return client.list_jobs(
                state=wanted,
                user=user,
                name=name,
                since=since_ts,
                sort=column,
                descending=descending != reverse,
                limit=limit,
                offset=offset,
            )

        if watch:
            watch_output(fetch, lambda jobs: _jobs_view(jobs, fmt), fmt=fmt, interval=interval)
            return
        jobs = fetch()
    if fmt in ("json", "yaml"):
        print_data(jobs, fmt)
        return
    console.print(_jobs_view(jobs, fmt))


def _jobs_view(jobs: Any, fmt: str) -> Any:
    if not jobs.jobs:
        return Text("no jobs")
    wide = fmt == "wide"
    columns = ["JOB", "STATE", "TASKS", "SUBMITTED", "DURATION"]
    if wide:
        columns += ["USER", "PRIORITY", "RESOURCES", "REASON"]
    t = table(*columns, "COMMAND")
    for j in jobs.jobs:
        counts = " ".join(f"{k.lower()}:{v}" for k, v in sorted(j.task_counts.items()))
        row = [
            j.job_id,
            styled(j.state.value),
            counts,
            ago(j.submitted_at),
            duration(j.started_at, j.finished_at),
        ]
        if wide:
            res = j.resources
            row += [
                j.user,
                j.priority.value.lower(),
                _resources_of(res) if res is not None else "-",
                j.error or j.pending_reason or "",
            ]
        t.add_row(*row, j.entrypoint)
    if jobs.total > jobs.offset + len(jobs.jobs) or jobs.offset:
        shown = (
            f"showing {jobs.offset + 1}-{jobs.offset + len(jobs.jobs)} of {jobs.total}; use --limit/--offset"
        )
        return Group(t, Text(shown, style="dim"))
    return t


def _resources_of(res: Any) -> str:
    return resources_text(res.cpu_millicores, res.memory_bytes, res.device)


def _job_id(value: str, client: Any = None) -> str:
    """A job id from what the user typed: ``/user/name``, ``user/name``, or a bare ``name`` of the
    current user (the newest such job; with ``client`` the controller is asked)."""
    if value.startswith("/"):
        return value
    if "/" in value or client is None:
        return "/" + value
    return resolve_short_name(client, value)


class CliError(click.ClickException):
    """One sentence for the user, exit code 1."""


def check_task(detail: Any, index: int) -> Any:
    """The task of ``detail`` with ``index``, or a sentence saying which tasks there are."""
    for task in detail.tasks:
        if task.task_index == index:
            return task
    count = len(detail.tasks)
    which = (
        "it has no tasks yet"
        if not count
        else "it has task 0"
        if count == 1
        else f"its tasks are 0-{count - 1}"
    )
    raise click.BadParameter(f"job {detail.job_id} has no task {index}; {which}", param_hint="--task")


def resolve_short_name(client: Any, name: str) -> str:
    from iris.client.client import default_user

    user = None if os.environ.get("IRIS_TOKEN") else default_user()  # a token's jobs are its user's
    found = client.list_jobs(name=name, user=user, sort="submitted_at", descending=True, limit=1000)
    mine = [j for j in found.jobs if j.name == name and j.parent_job_id is None]
    if not mine:
        who = f" of user {user}" if user else ""
        raise CliError(f"no job named {name!r}{who}; give its full id, e.g. /USER/{name} (see iris job list)")
    if len(mine) > 1:
        err_console.print(
            line((f"{len(mine)} jobs are named {name!r}: showing the newest, {mine[0].job_id}", "dim"))
        )
    return mine[0].job_id


def _status_view(detail: Any, attempts: bool) -> Any:
    parts: list[Any] = [
        line(
            (clean(detail.job_id), "bold"),
            "  ",
            styled(detail.state.value),
            f"  priority={detail.priority.value.lower()}  user={detail.user}",
        ),
        line("command: ", detail.entrypoint),
        line(f"resources: {_resources_of(detail.spec.resources)} × {detail.replicas} task(s)"),
        line(f"submitted {ago(detail.submitted_at)}, ran {duration(detail.started_at, detail.finished_at)}"),
    ]
    if detail.exit_code is not None:
        parts.append(line(f"exit code: {detail.exit_code}"))
    if detail.error:
        parts.append(line(("error:", "red"), " ", Text(clean(detail.error, one_line=False))))
    if detail.children:
        parts.append(line("sub-jobs: " + ", ".join(detail.children)))
    t = table("TASK", "STATE", "WORKER", "ATTEMPTS", "EXIT", "DETAIL")
    for task in detail.tasks:
        t.add_row(
            str(task.task_index),
            styled(task.state.value),
            task.worker_id or "-",
            str(task.attempt_count),
            "" if task.exit_code is None else str(task.exit_code),
            task.pending_reason or task.error or "",
        )
    parts.append(t)
    total = sum(detail.task_counts.values())
    if total > len(detail.tasks):
        parts.append(
            line(
                (f"showing the first {len(detail.tasks)} of {total} tasks (--json for the same page)", "dim")
            )
        )
    if attempts:
        at = table("TASK", "ATTEMPT", "UID", "STATE", "WORKER", "STARTED", "DURATION", "EXIT", "ERROR")
        for task in detail.tasks:
            for a in task.attempts:
                at.add_row(
                    str(task.task_index),
                    str(a.attempt_number),
                    a.attempt_uid,
                    styled(a.state.value),
                    a.worker_id or "-",
                    ago(a.started_at),
                    duration(a.started_at, a.finished_at),
                    "" if a.exit_code is None else str(a.exit_code),
                    a.error or "",
                )
        parts.append(at)
    return Group(*parts)


@job.command("status")
@click.argument("job_id", shell_complete=complete_job_id)
@click.option("--attempts", is_flag=True, help="List every attempt of every task (as -o wide).")
@watch_interval_option
@click.option(
    "-w", "--watch", is_flag=True, help="Keep showing the job until it ends (Ctrl-C stops watching)."
)
@output_option
@click.pass_obj
def job_status(obj: Ctx, job_id: str, attempts: bool, interval: float, watch: bool, fmt: str) -> None:
    """Show a job, its tasks and why any task is pending.

    JOB_ID is /USER/NAME, USER/NAME, or a NAME of your own jobs (the newest of that name).
    """
    attempts = attempts or fmt == "wide"
    with obj.client() as client:
        handle = client.job(_job_id(job_id, client))
        if watch:
            watch_output(
                handle.detail,
                lambda d: _status_view(d, attempts),
                fmt=fmt,
                interval=interval,
                done=lambda d: d.state in TERMINAL_JOB_STATES,
            )
            return
        detail = handle.detail()
    if fmt in ("json", "yaml"):
        print_data(detail, fmt)
        return
    console.print(_status_view(detail, attempts))
    logs_cmd.print_failures(detail)


_SINCE_PART = re.compile(r"(\d+(?:\.\d+)?)([smhd])")
_SINCE_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_since(text: str, now: float) -> float:
    """``30s``, ``5m``, ``1h30m``, ``2d`` before ``now``, or an ISO time (local unless it has an offset)."""
    value = text.strip().lower()
    parts = _SINCE_PART.findall(value)
    if parts and "".join(n + u for n, u in parts) == value:
        return now - sum(float(n) * _SINCE_UNITS[u] for n, u in parts)
    try:
        from datetime import datetime

        return datetime.fromisoformat(text.strip()).timestamp()
    except ValueError:
        raise ValueError(
            f"expected a duration like 5m, 1h or 2d, or a time like 2026-01-31T12:00, got {text!r}"
        ) from None


from iris.cli import logs_cmd  # noqa: E402 - needs the job group above


def _job_id_in_context(value: str) -> str:
    """``_job_id`` for commands that open their own client: a bare name asks the controller."""
    if value.startswith("/") or "/" in value:
        return _job_id(value)
    obj = click.get_current_context().find_object(Ctx)
    if obj is None:
        return _job_id(value)
    with obj.client() as client:
        return resolve_short_name(client, value)


logs_cmd.register(job, lambda obj: obj.client(), _job_id_in_context, complete_job_id=complete_job_id)


@job.command("exec", context_settings={"ignore_unknown_options": True})
@click.argument("job_id", shell_complete=complete_job_id)
@click.option("--task", "task_index", default=0, show_default=True, type=int, help="Task index.")
@click.option(
    "--timeout", default=60.0, show_default=True, type=float, help="Seconds before the command is stopped."
)
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
@click.pass_obj
def job_exec(obj: Ctx, job_id: str, task_index: int, timeout: float, command: Sequence[str]) -> None:
    """Run COMMAND beside a running task (its working directory and environment, or its pod)."""
    with obj.client() as client:
        handle = client.job(_job_id(job_id, client))
        task = check_task(handle.detail(), task_index)
        if task.state is not TaskState.RUNNING:
            raise CliError(
                f"task {task_index} of {handle.job_id} is {task.state.value.lower()}, not running; "
                "exec runs beside a running task"
            )
        result = handle.exec(list(command), task_index=task_index, timeout=timeout)
    sys.stdout.write(result.stdout)
    sys.stderr.write(result.stderr)
    sys.exit(result.exit_code)


@job.command("ps")
@click.argument("job_id", shell_complete=complete_job_id)
@click.option("--task", "task_index", default=0, show_default=True, type=int, help="Task index.")
@output_option
@click.pass_obj
def job_ps(obj: Ctx, job_id: str, task_index: int, fmt: str) -> None:
    """Show a task's processes (worker backend) or its pod's status (kubernetes backend)."""
    with obj.client() as client:
        handle = client.job(_job_id(job_id, client))
        check_task(handle.detail(), task_index)
        status = handle.process_status(task_index)
    if fmt in ("json", "yaml"):
        print_data(status, fmt)
        return
    if status.get("kind") == "process":
        console.print(
            line(f"attempt {status['attempt_uid']} on {status['target']}: ", styled(status["state"]))
        )
        t = table("PID", "PPID", "STATUS", "RSS", "CPU s", "COMMAND")
        for p in status.get("processes", []):
            t.add_row(
                str(p["pid"]),
                str(p["ppid"]),
                p["status"],
                format_bytes(p["rss_bytes"]),
                f"{p['cpu_seconds']:.2f}",
                p["command"],
            )
        console.print(t)
    else:
        print_json(status)


@job.command("stop")
@click.argument("job_ids", nargs=-1, required=True, shell_complete=complete_job_id)
@click.pass_obj
def job_stop(obj: Ctx, job_ids: Sequence[str]) -> None:
    """Stop jobs (and all their sub-jobs)."""
    with obj.client() as client:
        for jid in job_ids:
            full = _job_id(jid, client)
            state = client.job(full).kill()
            console.print(line(f"{full}: ", styled(state.value)))


# ---------------------------------------------------------------- workers and kubernetes


def _register_optional_groups() -> None:
    try:
        from iris.cli.worker_cmd import worker
    except ImportError:  # pragma: no cover - the worker group is part of the package
        worker = click.Group("worker", help="Run and list worker daemons.")
    cli.add_command(worker)

    @worker.command("list")
    @output_option
    @click.pass_obj
    def worker_list(obj: Ctx, fmt: str) -> None:
        """Workers registered with the controller, their capacity and health."""
        with obj.client() as client:
            workers = client.workers()
        if fmt in ("json", "yaml"):
            print_data(workers, fmt)
            return
        if not workers.workers:
            console.print("no workers registered")
            return
        t = table("WORKER", "STATUS", "ADDRESS", "CAPACITY", "USED", "TASKS", "LAST CONTACT", "ATTRIBUTES")
        for w in workers.workers:
            t.add_row(
                w.worker_id,
                styled(w.status.value),
                w.address,
                _resources_of(w.capacity),
                _resources_of(w.used),
                str(len(w.running_tasks)),
                ago(w.last_contact_at),
                " ".join(f"{k}={v}" for k, v in sorted(w.attributes.items())),
            )
        console.print(t)

    try:
        from iris.cli.k8s_cmd import k8s
    except ImportError:  # pragma: no cover
        return
    cli.add_command(k8s)


_register_optional_groups()
cli.add_command(completion)
_accept_controller_everywhere(cli)


def main(argv: list[str] | None = None) -> None:
    """Entry point: one plain sentence on error, never a traceback."""
    try:
        cli.main(args=argv, prog_name="iris", standalone_mode=False)
    except click.exceptions.Abort:
        err_console.print("aborted")
        sys.exit(130)
    except click.UsageError as exc:
        # One line that names the flag, and where to read more (no usage block).
        where = f" (see {exc.ctx.command_path} --help)" if exc.ctx is not None else ""
        err_console.print(line(("error:", "red"), " ", exc.format_message() + where))
        sys.exit(exc.exit_code)
    except click.ClickException as exc:
        err_console.print(line(("error:", "red"), " ", exc.format_message()))
        sys.exit(exc.exit_code)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except IrisError as exc:
        err_console.print(line(("error:", "red"), " ", exc.message))
        sys.exit(1)
    except KeyboardInterrupt:
        sys.exit(130)
    except ValidationError as exc:
        err_console.print(line(("error:", "red"), " ", validation_sentence(exc)))
        sys.exit(2)
    except ValueError as exc:
        err_console.print(line(("error:", "red"), " ", str(exc)))
        sys.exit(2)


if __name__ == "__main__":
    main()
