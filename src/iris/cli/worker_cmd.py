"""``iris worker ...``: run a worker daemon on this machine."""

from __future__ import annotations

from typing import Any

import click

from iris.cli.context import Ctx
from iris.cli.output import output_option
from iris.cluster.worker.config import WorkerConfigError, build_worker_config


class _OneLineErrors(click.Command):
    """A bad flag prints one sentence and exits 2: no usage block, never a traceback."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        try:
            return super().parse_args(ctx, args)
        except click.UsageError as exc:
            click.echo(f"iris worker {self.name}: {exc.format_message()}", err=True)
            ctx.exit(2)


@click.group(name="worker")
def worker() -> None:
    """Worker daemons (WORKER backend)."""


@worker.command(name="start", cls=_OneLineErrors)
@click.option("--controller", envvar="IRIS_CONTROLLER_URL", help="Controller URL (or $IRIS_CONTROLLER_URL).")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option("--port", default="0", show_default=True, help="Port to listen on (0: pick a free one).")
@click.option("--worker-id", help="Worker id (default: <hostname>-<port>).")
@click.option("--cpu", help="Cores to offer, e.g. 4, 0.5 or 500m (default: all).")
@click.option("--memory", help="Memory to offer, e.g. 4GB (default: all RAM).")
@click.option("--disk", help="Disk to offer, e.g. 100GB (default: free space of the state dir).")
@click.option("--attr", "attrs", multiple=True, help="Worker attribute key=value (repeatable).")
@click.option(
    "--device",
    help="Accelerator type:variant:count, e.g. gpu:a100:8 (default: GPUs found by nvidia-smi, or TPU chips; none: offer no device).",
)
@click.option("--slice-id", help="Slice this worker belongs to.")
@click.option("--scale-group", help="Scale group this worker belongs to.")
@click.option("--state-dir", help="Where attempts run and logs live (default: ~/.iris/workers/<id>).")
@click.option("--ready-file", help="Write {worker_id, address} JSON here once serving.")
@click.option(
    "--reregister-after",
    default="5",
    show_default=True,
    help="Seconds without a reconcile before registering again.",
)
@click.option(
    "--task-uids",
    help="When run as root, each attempt runs as its own uid from this range (default 200000-299999; off: as root).",
)
@click.option(
    "--fence-after",
    help="Seconds without a reconcile after which the worker kills its own attempts (default: as the controller advises).",
)
@click.option("--bundle-max-size", help="A workspace bundle unpacks to at most this much (default 10GB).")
@click.option(
    "--bundle-max-entries",
    help="A workspace bundle unpacks to at most this many files and directories (default 1000000).",
)
@click.option(
    "--log-format",
    type=click.Choice(["text", "json"]),
    help="Log lines as text or JSON (default: $IRIS_LOG_FORMAT or text).",
)
@click.option("--log-file", help="Write logs to this file, rotated (default: stderr).")
def start(log_format: str | None, log_file: str | None, **flags: Any) -> None:
    """Run a worker daemon until SIGTERM or Ctrl-C (then every attempt is killed)."""
    # The daemon (its web server, device probes) is imported only here: every other command starts
    # without it.
    from iris.cluster.worker.main import run_worker

    try:
        config = build_worker_config(**flags)
        code = run_worker(config, log_format=log_format, log_file=log_file)
    except WorkerConfigError as exc:
        click.echo(f"iris worker start: {exc}", err=True)
        raise SystemExit(2) from None
    raise SystemExit(code)


@worker.command("list")
@output_option
@click.pass_obj
def worker_list(obj: Ctx, fmt: str) -> None:
    """Workers registered with the controller, their capacity and health."""
    from iris.cli.output import ago, console, print_data, resources_of, styled, table

    with obj.client() as client:
        workers = client.workers()
    if fmt in ("json", "yaml"):
        print_data(workers, fmt)
        return
    if not workers.workers:
        console.print("no workers registered")
        return
    cordoned = any(w.cordon for w in workers.workers)
    columns = ["WORKER", "STATUS", "ADDRESS", "CAPACITY", "USED", "TASKS", "LAST CONTACT", "ATTRIBUTES"]
    t = table(*columns, *(["REASON"] if cordoned else []))
    for w in workers.workers:
        reason = []
        if cordoned:
            reason = [(w.cordon_reason or "") + (" (automatic)" if w.cordon_automatic else "")]
        t.add_row(
            w.worker_id,
            styled(w.status.value) + (f",{w.cordon}" if w.cordon else ""),
            w.address,
            resources_of(w.capacity),
            resources_of(w.used),
            str(len(w.running_tasks)),
            ago(w.last_contact_at),
            " ".join(f"{k}={v}" for k, v in sorted(w.attributes.items())),
            *reason,
        )
    console.print(t)


def _cordon_call(obj: Ctx, worker_id: str, action: str, reason: str | None) -> None:
    from urllib.parse import quote

    with obj.http() as http:
        body = None if action == "uncordon" else {"reason": reason or ""}
        http.request("POST", f"/api/v1/workers/{quote(worker_id, safe='')}:{action}", json_body=body)


@worker.command("cordon")
@click.argument("worker_id", metavar="WORKER")
@click.option("--reason", help="Why (shown by 'iris worker list' and the dashboard).")
@click.pass_obj
def worker_cordon(obj: Ctx, worker_id: str, reason: str | None) -> None:
    """Place no new work on WORKER; what runs there runs on (admin)."""
    _cordon_call(obj, worker_id, "cordon", reason)
    click.echo(f"worker {worker_id} cordoned")


@worker.command("drain")
@click.argument("worker_id", metavar="WORKER")
@click.option("--reason", help="Why (shown by 'iris worker list' and the dashboard).")
@click.pass_obj
def worker_drain(obj: Ctx, worker_id: str, reason: str | None) -> None:
    """Place no new work on WORKER; its running tasks finish, or are moved elsewhere once
    defaults.worker.drain_grace_s has passed (admin)."""
    _cordon_call(obj, worker_id, "drain", reason)
    click.echo(f"worker {worker_id} draining")


@worker.command("uncordon")
@click.argument("worker_id", metavar="WORKER")
@click.pass_obj
def worker_uncordon(obj: Ctx, worker_id: str) -> None:
    """Let WORKER take new work again (lifts a cordon, a drain or an automatic quarantine; admin)."""
    _cordon_call(obj, worker_id, "uncordon", None)
    click.echo(f"worker {worker_id} uncordoned")
