"""``iris completion bash|zsh|fish``: print the shell completion script (click's shell completion)."""

from __future__ import annotations

import click
from click.shell_completion import get_completion_class

# The variable the `iris` entry point reads to answer completion requests instead of running.
COMPLETE_VAR = "_IRIS_COMPLETE"
SHELLS = ("bash", "zsh", "fish")


def completion_script(root: click.Command, shell: str, prog_name: str = "iris") -> str:
    """The script that makes ``shell`` complete ``prog_name``'s commands, options and choices."""
    cls = get_completion_class(shell)
    if cls is None:
        raise click.BadParameter(f"no completion for {shell!r}; choose one of {', '.join(SHELLS)}")
    return cls(root, {}, prog_name, COMPLETE_VAR).source()


@click.command("completion")
@click.argument("shell", type=click.Choice(SHELLS))
@click.pass_context
def completion(ctx: click.Context, shell: str) -> None:
    """Print the completion script for SHELL.

    \b
    Enable it for every new shell:
      bash:  echo 'eval "$(iris completion bash)"' >> ~/.bashrc
      zsh:   echo 'eval "$(iris completion zsh)"' >> ~/.zshrc
      fish:  iris completion fish > ~/.config/fish/completions/iris.fish
    """
    click.echo(completion_script(ctx.find_root().command, shell))
