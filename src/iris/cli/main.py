"""The `iris` command: run jobs, watch them, and operate clusters.

Each command lives in a module of its own, imported only when that command runs (or when a help
page lists it): `iris job logs --tail 3` starts without the code that draws tables, submits jobs
or runs a local cluster.
"""

from __future__ import annotations

import importlib
import sys
from typing import Any

import click

from iris.cli.context import Ctx
from iris.rpc.errors import IrisError


class LazyGroup(click.Group):
    """A group whose commands are ``"module:attribute"`` paths, imported on first use."""

    def __init__(self, *args: Any, lazy: dict[str, str], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._lazy = lazy

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*self.commands, *self._lazy})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.commands and cmd_name in self._lazy:
            module, _, attribute = self._lazy[cmd_name].partition(":")
            command = getattr(importlib.import_module(module), attribute)
            _accept_controller_everywhere(command)
            self.add_command(command, cmd_name)
        return self.commands.get(cmd_name)


def _controller_option(ctx: click.Context, _param: click.Parameter, value: str | None) -> None:
    """``--controller`` given after the subcommand: the same as before it."""
    if value:
        root = ctx.find_object(Ctx)
        if root is not None:
            root.controller_flag = value


def _accept_controller_everywhere(command: click.Command) -> None:
    if isinstance(command, LazyGroup):
        return  # its commands get the option as they load
    if isinstance(command, click.Group):
        for sub in command.commands.values():
            _accept_controller_everywhere(sub)
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


@click.group(
    cls=LazyGroup,
    lazy={
        "cluster": "iris.cli.cluster_cmd:cluster",
        "completion": "iris.cli.completion:completion",
        "controller": "iris.cli.controller_cmd:controller",
        "k8s": "iris.cli.k8s_cmd:k8s",
        "secret": "iris.cli.secret_cmd:secret",
        "user": "iris.cli.user_cmd:user",
        "worker": "iris.cli.worker_cmd:worker",
    },
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
)
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


@cli.group(
    cls=LazyGroup,
    lazy={
        **{name: f"iris.cli.job_cmd:job_{name}" for name in ("run", "list", "status", "exec", "ps", "stop")},
        **{name: f"iris.cli.logs_cmd:job_{name}" for name in ("logs", "summary", "wait")},
        "profile": "iris.cli.profile_cmd:job_profile",
    },
)
def job() -> None:
    """Run, list, inspect, follow and stop jobs."""


def main(argv: list[str] | None = None) -> None:
    """Entry point: one plain sentence on error, never a traceback."""
    try:
        cli.main(args=argv, prog_name="iris", standalone_mode=False)
    except click.exceptions.Abort:
        _say("aborted", error=False)
        sys.exit(130)
    except click.UsageError as exc:
        # One line that names the flag, and where to read more (no usage block).
        where = f" (see {exc.ctx.command_path} --help)" if exc.ctx is not None else ""
        _say(exc.format_message() + where)
        sys.exit(exc.exit_code)
    except click.ClickException as exc:
        _say(exc.format_message())
        sys.exit(exc.exit_code)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except IrisError as exc:
        _say(exc.message)
        sys.exit(1)
    except KeyboardInterrupt:
        sys.exit(130)
    except ValueError as exc:  # pydantic's ValidationError is one
        _say(_value_error_sentence(exc))
        sys.exit(2)


def _value_error_sentence(exc: ValueError) -> str:
    pydantic = sys.modules.get("pydantic")
    if pydantic is not None and isinstance(exc, pydantic.ValidationError):
        from iris.cli.validation import validation_sentence

        return validation_sentence(exc)
    return str(exc)


def _say(message: str, *, error: bool = True) -> None:
    from iris.cli.output import err_console, line

    err_console.print(line(("error:", "red"), " ", message) if error else message)


if __name__ == "__main__":
    main()
