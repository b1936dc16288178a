"""What every command shares: the controller to talk to, and reading what the user typed.

Kept light (click and the standard library): each command imports what it draws with.
"""

from __future__ import annotations

import os
from typing import Any

import click

from iris.rpc.enums import TaskState
from iris.rpc.http import HttpClient
from iris.rpc.units import parse_bytes, parse_cpu_millicores

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

    def http(self) -> HttpClient:
        """The controller's API as plain JSON, without the SDK's models (commands that only print)."""
        return HttpClient(self.controller, token=os.environ.get("IRIS_TOKEN"))


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


class CliError(click.ClickException):
    """One sentence for the user, exit code 1."""


def check_quantities(cpu: str | None, memory: str | None, disk: str | None = None) -> None:
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


def job_id_of(value: str, client: Any = None) -> str:
    """A job id from what the user typed: ``/user/name``, ``user/name``, or a bare ``name`` of the
    current user (the newest such job; with ``client`` the controller is asked)."""
    if value.startswith("/"):
        return value
    if "/" in value or client is None:
        return "/" + value
    return resolve_short_name(client, value)


def check_task(detail: Any, index: int) -> Any:
    """The task of ``detail`` with ``index``, or a sentence saying which tasks there are."""
    for task in detail.tasks:
        if task.task_index == index:
            return task
    raise no_such_task(detail.job_id, len(detail.tasks), index)


def check_running_task(detail: Any, index: int, why: str) -> Any:
    """The task of ``detail`` with ``index`` if it is running; else one sentence ending with ``why``
    (what only a running task allows)."""
    task = check_task(detail, index)
    if task.state is not TaskState.RUNNING:
        raise CliError(f"task {index} of {detail.job_id} is {task.state.value.lower()}, not running; {why}")
    return task


def no_such_task(job_id: str, count: int, index: int) -> click.BadParameter:
    which = (
        "it has no tasks yet"
        if not count
        else "it has task 0"
        if count == 1
        else f"its tasks are 0-{count - 1}"
    )
    return click.BadParameter(f"job {job_id} has no task {index}; {which}", param_hint="--task")


def resolve_short_name(client: Any, name: str) -> str:
    from iris.client.client import default_user

    user = None if os.environ.get("IRIS_TOKEN") else default_user()  # a token's jobs are its user's
    found = client.list_jobs(name=name, user=user, sort="submitted_at", descending=True, limit=1000)
    mine = [j for j in found.jobs if j.name == name and j.parent_job_id is None]
    if not mine:
        who = f" of user {user}" if user else ""
        raise CliError(f"no job named {name!r}{who}; give its full id, e.g. /USER/{name} (see iris job list)")
    if len(mine) > 1:
        from iris.cli.output import err_console, line

        err_console.print(
            line((f"{len(mine)} jobs are named {name!r}: showing the newest, {mine[0].job_id}", "dim"))
        )
    return mine[0].job_id
