"""``iris job run|list|status|exec|ps|stop``: submit, list, inspect and stop jobs.

``iris job logs|summary|wait`` live in ``logs_cmd``; ``main`` puts both in the ``job`` group.
"""

from __future__ import annotations

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

from iris.cli.context import (
    Ctx,
    check_quantities,
    check_running_task,
    check_task,
    complete_job_id,
    job_id_of,
)
from iris.cli.job_options import (
    did_you_mean,
    expand_requirement_files,
    tpu_request,
)
from iris.cli.logs_cmd import print_failures
from iris.cli.output import (
    STATE_STYLE,
    ago,
    clean,
    console,
    duration,
    err_console,
    line,
    output_option,
    print_data,
    print_json,
    resources_of,
    styled,
    table,
)
from iris.cli.output import watch as watch_output
from iris.cli.params import CONSTRAINT, DEVICE, DURATION, GPU, SIZE_MB, TPU
from iris.cli.progress import follow_job, stop_signals_interrupt
from iris.cli.text import parse_since
from iris.cli.validation import validation_sentence
from iris.rpc.enums import TERMINAL_JOB_STATES, JobState
from iris.rpc.errors import IrisError
from iris.rpc.units import format_bytes


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


def _parse_secrets(values: Sequence[str]) -> list[Any]:
    from iris.client.client import parse_secret_ref

    refs = []
    for item in values:
        try:
            refs.append(parse_secret_ref(item))
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint="--secret") from None
    return refs


def _parse_env(values: Sequence[str]) -> dict[str, str]:
    env = {}
    for item in values:
        if "=" not in item or item.startswith("="):
            raise click.BadParameter(f"expected KEY=VALUE, got {item!r}", param_hint="--env")
        key, value = item.split("=", 1)
        env[key] = value
    return env


@click.command("run", context_settings={"ignore_unknown_options": False})
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
@click.option(
    "--no-auth",
    is_flag=True,
    help="With --local: do not protect the embedded cluster with a one-time token.",
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
    "--secret",
    "secrets",
    multiple=True,
    metavar="NAME[=ENVVAR]",
    help="Inject your secret NAME (iris secret set) as $ENVVAR (default $NAME); masked in logs. Repeatable.",
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
    "--max-task-failures",
    default=0,
    show_default=True,
    type=click.IntRange(0, 100_000),
    help="Tasks that may fail for good before the job fails and its other tasks are killed "
    "(for sweeps: the rest keep running).",
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
@click.option(
    "--raw",
    "raw_output",
    is_flag=True,
    help="Stream the output exactly as written, terminal escapes included (by default escapes other "
    "than colours, and control characters, are shown as \\x1b, \\r....).",
)
@click.option("--json", "as_json", is_flag=True, help="With --no-wait: print the job id as JSON.")
@click.option(
    "--no-workspace",
    is_flag=True,
    help="Do not package the current directory (by default the task runs in a copy of it).",
)
@click.option(
    "--image",
    metavar="IMAGE",
    help="Run each task in this container image (docker CLI on workers, the pod's image on Kubernetes); "
    "the workspace is its working dir. Default: the cluster's defaults.task_image, else a plain process.",
)
@click.option(
    "--image-pull-policy",
    type=click.Choice(["if-not-present", "always", "never"]),
    default="if-not-present",
    show_default=True,
    help="When the worker pulls --image: only if missing, every time, or never (a missing image fails the task).",
)
@click.option(
    "--pip",
    "pip_packages",
    multiple=True,
    metavar="PKG",
    help="Install PKG in the task's environment (repeatable): a requirement or a remote URL; local "
    "paths are refused (ship local code in the workspace). --pip -r FILE takes the requirements of a "
    "file in the workspace (requirements only, -r nests; installer options are refused).",
)
@click.option(
    "--no-sync",
    is_flag=True,
    help="Do not run in the project environment. By default, when the workspace has pyproject.toml and "
    "uv.lock, tasks run in `uv sync --frozen` of it, built once per lock, Python and extras on each worker.",
)
@click.option(
    "--extra",
    "extras",
    multiple=True,
    metavar="NAME",
    help="Sync the project's optional dependencies NAME too (repeatable; as uv sync --extra).",
)
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
@click.pass_context
def job_run(
    ctx: click.Context,
    local: bool,
    workers: int,
    no_auth: bool,
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
    secrets: Sequence[str],
    replicas: int,
    max_retries: int,
    max_preemptions: int,
    max_task_failures: int,
    timeout: float | None,
    scheduling_timeout: float | None,
    priority: str,
    dry_run: bool,
    wait_for_capacity: bool,
    replace: bool,
    no_wait: bool,
    raw_output: bool,
    as_json: bool,
    no_workspace: bool,
    image: str | None,
    image_pull_policy: str,
    pip_packages: Sequence[str],
    no_sync: bool,
    extras: Sequence[str],
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
      iris job run --image iris-test/python:3.11 -- python3 train.py
    """
    from iris.client import CoschedulingConfig, Entrypoint, EnvironmentSpec, ResourceSpec
    from iris.client.workspace import project_environment
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
    check_quantities(cpu, None)
    res_kwargs: dict[str, Any] = {"cpu": cpu, "memory_bytes": memory, "device": gpu or device}
    if disk:
        res_kwargs["disk_bytes"] = disk
    replicas_given = ctx.get_parameter_source("replicas") is not click.core.ParameterSource.DEFAULT
    submit_kwargs = dict(
        name=name,
        resources=_one_line_validation(lambda: ResourceSpec(**res_kwargs)),
        replicas=replicas,
        env=_parse_env(env),
        secrets=_parse_secrets(secrets),
        constraints=list(constraints),
        preferences=list(preferences),
        coscheduling=CoschedulingConfig(group_by=group_by) if group_by else None,
        ports=list(ports),
        max_retries_failure=max_retries,
        max_retries_preemption=max_preemptions,
        max_task_failures=max_task_failures,
        timeout=timeout,
        scheduling_timeout=scheduling_timeout,
        priority=priority,
        wait_for_capacity=wait_for_capacity,
        replace=replace,
        image=image,
        image_pull_policy=image_pull_policy,
    )
    try:
        pip_packages, command = expand_requirement_files(pip_packages, list(command), Path.cwd())
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--pip") from None
    if not command:
        raise click.UsageError("give the command to run after --, e.g. iris job run -- python train.py")
    workspace = None if no_workspace else Path.cwd()
    environment = EnvironmentSpec(pip_packages=list(pip_packages)) if pip_packages else None
    try:
        environment = project_environment(
            environment, workspace, sync=False if no_sync or workspace is None else None, extras=extras
        )
    except (IrisError, ValidationError) as exc:
        raise click.BadParameter(
            validation_sentence(exc) if isinstance(exc, ValidationError) else str(exc), param_hint="--extra"
        ) from None
    if environment is not None:
        submit_kwargs["environment"] = environment
    request = ClusterRequest(zone=zone, region=region, tpu=tpu, replicas_given=replicas_given)
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
            workers=workers,
            port=0,
            worker_cpu=share_cpu,
            worker_memory=share_memory,
            one_time_token=not no_auth,
        ) as client:
            code = _run_and_follow(
                client, entrypoint, submit_kwargs, request, no_wait=False, as_json=as_json, detach_ok=False,
                workspace=workspace, raw=raw_output,
            )  # fmt: skip
    else:
        with obj.client() as client:
            code = _run_and_follow(
                client, entrypoint, submit_kwargs, request, no_wait=no_wait, as_json=as_json, detach_ok=True,
                workspace=workspace, raw=raw_output,
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
    raw: bool = False,
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
        job, controller_url=client.url, multi=multi, detach_ok=detach_ok, show_dashboard=detach_ok, raw=raw
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


@click.command("list")
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
    t = table(*columns, "COMMAND", free=("REASON", "COMMAND"))
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
                resources_of(res) if res is not None else "-",
                j.error or j.pending_reason or "",
            ]
        t.add_row(*row, j.entrypoint)
    if jobs.total > jobs.offset + len(jobs.jobs) or jobs.offset:
        shown = (
            f"showing {jobs.offset + 1}-{jobs.offset + len(jobs.jobs)} of {jobs.total}; use --limit/--offset"
        )
        return Group(t, Text(shown, style="dim"))
    return t


def _status_view(detail: Any, attempts: bool) -> Any:
    parts: list[Any] = [
        line(
            (clean(detail.job_id), "bold"),
            "  ",
            Text(detail.state_label(), style=STATE_STYLE.get(detail.state.value, "")),
            f"  priority={detail.priority.value.lower()}  user={detail.user}",
        ),
        line("command: ", detail.entrypoint),
        line(f"resources: {resources_of(detail.spec.resources)} × {detail.replicas} task(s)"),
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


@click.command("status")
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
        handle = client.job(job_id_of(job_id, client))
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
    print_failures(detail)


@click.command("exec", context_settings={"ignore_unknown_options": True})
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
        handle = client.job(job_id_of(job_id, client))
        check_running_task(handle.detail(), task_index, "exec runs beside a running task")
        result = handle.exec(list(command), task_index=task_index, timeout=timeout)
    sys.stdout.write(result.stdout)
    sys.stderr.write(result.stderr)
    sys.exit(result.exit_code)


@click.command("ps")
@click.argument("job_id", shell_complete=complete_job_id)
@click.option("--task", "task_index", default=0, show_default=True, type=int, help="Task index.")
@output_option
@click.pass_obj
def job_ps(obj: Ctx, job_id: str, task_index: int, fmt: str) -> None:
    """Show a task's processes (worker backend) or its pod's status (kubernetes backend)."""
    with obj.client() as client:
        handle = client.job(job_id_of(job_id, client))
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


@click.command("stop")
@click.argument("job_ids", nargs=-1, required=True, shell_complete=complete_job_id)
@click.pass_obj
def job_stop(obj: Ctx, job_ids: Sequence[str]) -> None:
    """Stop jobs (and all their sub-jobs)."""
    with obj.client() as client:
        for jid in job_ids:
            full = job_id_of(jid, client)
            state = client.job(full).kill()
            console.print(line(f"{full}: ", styled(state.value)))
