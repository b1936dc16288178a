"""``iris secret set|list|rm``: per-user secrets, injected into jobs that name them (``--secret``)."""

from __future__ import annotations

import sys

import click

from iris.cli.context import Ctx
from iris.cli.output import output_option


@click.group(name="secret")
def secret() -> None:
    """Your secrets (tokens, keys): stored encrypted by the controller, injected into jobs.

    \b
    Examples:
      printf %s "$HF_TOKEN" | iris secret set HF_TOKEN
      iris job run --secret HF_TOKEN --secret WANDB=WANDB_API_KEY -- python train.py
      iris secret list
      iris secret rm HF_TOKEN

    A value is never shown again by any command, API or page; a task that prints it has it
    masked as *** in its stored log.
    """


@secret.command(name="set")
@click.argument("name")
@click.option("--user", help="Admins: whose secret (default: you).")
@click.pass_obj
def secret_set(obj: Ctx, name: str, user: str | None) -> None:
    """Store secret NAME, its value read from standard input (one trailing newline is dropped)."""
    if sys.stdin.isatty():
        click.echo(f"value of {name} (then Ctrl-D): ", err=True, nl=False)
    value = sys.stdin.read()
    if value.endswith("\n"):
        value = value[:-1]
        if value.endswith("\r"):
            value = value[:-1]
    if not value:
        raise click.UsageError(
            'the value is empty: pipe it in, e.g. printf %s "$TOKEN" | iris secret set NAME'
        )
    with obj.client() as client:
        client.set_secret(name, value, user=user)
    click.echo(f"secret {name} set")


@secret.command(name="list")
@click.option("--user", help="Admins: only this user's secrets (default: everyone's).")
@output_option
@click.pass_obj
def secret_list(obj: Ctx, user: str | None, fmt: str) -> None:
    """Names of your secrets and when they were set (never their values)."""
    from iris.cli.output import ago, console, print_data, table

    with obj.client() as client:
        found = client.list_secrets(user=user)
    if fmt in ("json", "yaml"):
        print_data(found, fmt)
        return
    if not found.secrets:
        console.print("no secrets")
        return
    t = table("NAME", "USER", "UPDATED")
    for s in found.secrets:
        t.add_row(s.name, s.user, ago(s.updated_at))
    console.print(t)


@secret.command(name="rm")
@click.argument("name")
@click.option("--user", help="Admins: whose secret (default: you).")
@click.pass_obj
def secret_rm(obj: Ctx, name: str, user: str | None) -> None:
    """Delete secret NAME (attempts started afterwards run without it)."""
    with obj.client() as client:
        client.remove_secret(name, user=user)
    click.echo(f"secret {name} removed")
