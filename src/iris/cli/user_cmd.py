"""``iris user budget set|get|list|rm``: per-user budgets, the scheduler's first gate."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from iris.cli.context import Ctx
from iris.cli.output import output_option

if TYPE_CHECKING:
    from iris.rpc.models import UserBudget, UserBudgetInfo

BANDS = ("PRODUCTION", "INTERACTIVE", "BATCH")


@click.group(name="user")
def user() -> None:
    """Users of the cluster: their budgets."""


@user.group(name="budget")
def budget() -> None:
    """What each user's running work may hold at once (admins change them when auth is on).

    \b
    Examples:
      iris user budget set alice --cpu 8 --memory 32GB --gpu 2 --max-band INTERACTIVE
      iris user budget set '*' --cpu 4        every user without their own budget
      iris user budget get alice
      iris user budget list
      iris user budget rm alice

    Work beyond the budget waits (its pending reason says "user budget: alice uses 8 of 8
    cpu"); a job asking for a band above --max-band, or larger than the budget allows at
    once, is refused at submit. PRODUCTION is for admins unless a budget's --max-band is
    PRODUCTION. On the kubernetes backend Kueue admits work instead: see docs/budgets.md.
    """


@budget.command(name="set")
@click.argument("name", metavar="USER")
@click.option("--cpu", help="Cores at once, e.g. 8 or 500m (default: unlimited).")
@click.option("--memory", metavar="SIZE", help="Memory at once, e.g. 32GB (default: unlimited).")
@click.option("--gpu", type=click.IntRange(min=0), help="GPUs at once (default: unlimited).")
@click.option("--tpu", type=click.IntRange(min=0), help="TPU chips at once (default: unlimited).")
@click.option(
    "--max-band",
    type=click.Choice(BANDS, case_sensitive=False),
    help="The most important band USER may submit at (default: INTERACTIVE, or PRODUCTION for admins).",
)
@output_option
@click.pass_obj
def budget_set(
    obj: Ctx,
    name: str,
    cpu: str | None,
    memory: str | None,
    gpu: int | None,
    tpu: int | None,
    max_band: str | None,
    fmt: str,
) -> None:
    """Set USER's budget (replacing the one set before; options left out are unlimited)."""
    from iris.rpc.models import UserBudget

    if all(v is None for v in (cpu, memory, gpu, tpu, max_band)):
        raise click.UsageError("give at least one of --cpu, --memory, --gpu, --tpu, --max-band")
    new = UserBudget(cpu=cpu, memory=memory, gpu=gpu, tpu=tpu, max_band=max_band)
    with obj.client() as client:
        info = client.set_budget(name, new)
    _show(info, fmt, f"budget of {name} set: ")


@budget.command(name="get")
@click.argument("name", metavar="USER")
@output_option
@click.pass_obj
def budget_get(obj: Ctx, name: str, fmt: str) -> None:
    """USER's budget (their own, else the '*' default)."""
    with obj.client() as client:
        info = client.get_budget(name)
    _show(info, fmt, f"{name}: " if info.user == name else f"{name} (the {info.user} default): ")


@budget.command(name="list")
@output_option
@click.pass_obj
def budget_list(obj: Ctx, fmt: str) -> None:
    """Every budget: set with this command (source api) or from the cluster config (config)."""
    from iris.cli.output import clean, console, print_data, table

    with obj.client() as client:
        found = client.list_budgets()
    if fmt in ("json", "yaml"):
        print_data(found, fmt)
        return
    if not found.budgets:
        console.print("no budgets: every user's work is limited by the cluster's capacity only")
        return
    t = table("USER", "CPU", "MEMORY", "GPU", "TPU", "MAX BAND", "SOURCE")
    for info in found.budgets:
        t.add_row(clean(info.user), *_cells(info.budget), info.source)
    console.print(t)


@budget.command(name="rm")
@click.argument("name", metavar="USER")
@click.pass_obj
def budget_rm(obj: Ctx, name: str) -> None:
    """Remove USER's budget (a default from the cluster config, if any, applies again)."""
    with obj.client() as client:
        client.remove_budget(name)
    click.echo(f"budget of {name} removed")


def _cells(b: UserBudget) -> list[str]:
    from iris.rpc.units import format_bytes, format_cpu

    return [
        "-" if b.cpu_millicores is None else format_cpu(b.cpu_millicores),
        "-" if b.memory_bytes is None else format_bytes(b.memory_bytes),
        "-" if b.gpu is None else str(b.gpu),
        "-" if b.tpu is None else str(b.tpu),
        "-" if b.max_band is None else b.max_band.value,
    ]


def _show(info: UserBudgetInfo, fmt: str, prefix: str) -> None:
    from iris.cli.output import clean, print_data

    if fmt in ("json", "yaml"):
        print_data(info, fmt)
        return
    cpu, memory, gpu, tpu, band = _cells(info.budget)
    click.echo(
        clean(prefix)
        + f"cpu {cpu}, memory {memory}, gpu {gpu}, tpu {tpu}, max band {band} (source {info.source})"
    )
