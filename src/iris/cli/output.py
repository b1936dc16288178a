"""Rendering for people (rich tables) and for scripts (--json).

User text (commands, names, errors, log lines, pending reasons) is printed verbatim: the consoles
interpret no markup, highlight nothing and replace no emoji codes; our own styling is passed as
``Text`` objects. In tables and one-line fields, user text goes through ``clean``: terminal escape
sequences are removed, control characters made visible and undecodable bytes shown as U+FFFD.
"""

from __future__ import annotations

import functools
import json
import os
import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import click
from pydantic import BaseModel
from rich.console import Console
from rich.table import Table
from rich.text import Text

from iris.cli.text import NEWLINE_MARK, ago, clean, duration, iso_time, safe_line, strip_ansi
from iris.rpc.units import format_bytes, format_cpu

if TYPE_CHECKING:
    from iris.rpc.models import DeviceSpec

__all__ = ["NEWLINE_MARK", "ago", "clean", "duration", "iso_time", "safe_line", "strip_ansi"]


def _width(stream: object) -> int | None:
    """Terminals report their width; for pipes and files use $COLUMNS or a wide default, not 80."""
    if getattr(stream, "isatty", lambda: False)():
        return None
    return int(os.environ.get("COLUMNS", "200"))


def _console(stderr: bool) -> Console:
    return Console(
        stderr=stderr,
        soft_wrap=True,
        width=_width(sys.stderr if stderr else sys.stdout),
        markup=False,
        highlight=False,
        emoji=False,
    )


console = _console(stderr=False)
err_console = _console(stderr=True)


def plain(text: object, style: str = "") -> Text:
    """A one-line ``Text`` of user text: never markup, never highlighted."""
    return Text(clean(text), style=style)


def styled(state: str) -> Text:
    """A state name in its colour."""
    return Text(state, style=STATE_STYLE.get(state, ""))


def line(*parts: str | Text | tuple[str, str]) -> Text:
    """Assemble one printable line: ``str`` parts are user text (cleaned), ``(text, style)`` ours."""
    out = Text()
    for p in parts:
        if isinstance(p, Text):
            out.append_text(p)
        elif isinstance(p, tuple):
            out.append(p[0], style=p[1])
        else:
            out.append(clean(p))
    return out


STATE_STYLE = {
    "SUCCEEDED": "green",
    "RUNNING": "cyan",
    "BUILDING": "cyan",
    "ASSIGNED": "cyan",
    "PENDING": "yellow",
    "FAILED": "red",
    "WORKER_FAILED": "red",
    "UNSCHEDULABLE": "red",
    "KILLED": "magenta",
    "PREEMPTED": "magenta",
    "COSCHED_FAILED": "red",
    "HEALTHY": "green",
    "DEGRADED": "yellow",
    "DEAD": "red",
}


FORMATS = ("table", "wide", "json", "yaml")


def output_option(command: Callable[..., Any]) -> Callable[..., Any]:
    """``-o table|wide|json|yaml`` and ``--json`` (same as ``-o json``), passed on as ``fmt``."""

    command = click.option(
        "--json", "as_json", is_flag=True, help="Print JSON for scripts (same as -o json)."
    )(command)
    command = click.option(
        "-o",
        "--output",
        "fmt",
        type=click.Choice(FORMATS, case_sensitive=False),
        default="table",
        show_default=True,
        help="Output format: a table, a wide table with more columns, JSON or YAML (times in ISO 8601).",
    )(command)

    @functools.wraps(command)
    def run(*args: Any, fmt: str, as_json: bool, **kwargs: Any) -> Any:
        return command(*args, fmt="json" if as_json else fmt.lower(), **kwargs)

    return run


def _plain_data(data: Any) -> Any:
    if isinstance(data, BaseModel):
        data = data.model_dump(mode="json")
    return _iso_times(data)


def _iso_times(value: Any, key: str = "") -> Any:
    """Epoch seconds under ``*_at`` / ``ts`` keys become ISO 8601 UTC strings."""
    if isinstance(value, dict):
        return {k: _iso_times(v, str(k)) for k, v in value.items()}
    if isinstance(value, list):
        return [_iso_times(v, key) for v in value]
    if (
        (key.endswith("_at") or key == "ts")
        and isinstance(value, int | float)
        and not isinstance(value, bool)
    ):
        return iso_time(float(value))
    return value


def print_json(data: Any) -> None:
    sys.stdout.write(json.dumps(_plain_data(data), indent=2, default=str) + "\n")
    sys.stdout.flush()


def print_data(data: Any, fmt: str) -> None:
    """JSON or YAML for scripts."""
    if fmt == "yaml":
        import yaml

        sys.stdout.write(yaml.safe_dump(_plain_data(data), sort_keys=False, allow_unicode=True))
        sys.stdout.flush()
    else:
        print_json(data)


def resources_text(cpu_millicores: int, memory_bytes: int, device: DeviceSpec | None = None) -> str:
    text = f"{format_cpu(cpu_millicores)} cpu, {format_bytes(memory_bytes)}"
    if device is not None and device.count > 0:
        text += f", {device.count} {device.type}" + (f" ({device.variant})" if device.variant else "")
    return text


class PlainTable(Table):
    """A table whose ``str`` cells are user text: cleaned to one line, never read as markup.

    When it is wider than the terminal, the ``keep`` columns (ids, states) stay whole, the other
    short columns come next, and the free-text columns (commands, reasons) give way first.
    """

    keep_columns: frozenset[int] = frozenset()
    free_columns: frozenset[int] = frozenset()

    def add_row(self, *cells: Any, **kwargs: Any) -> None:
        super().add_row(*(_cell(c) for c in cells), **kwargs)

    def __rich_console__(self, console: Console, options: Any) -> Any:
        self._fit(console, options.max_width)
        yield from super().__rich_console__(console, options)

    def _fit(self, console: Console, max_width: int) -> None:
        needs = []
        for column in self.columns:
            cells = [column.header, *column.cells]
            needs.append(max(console.measure(c).maximum if not isinstance(c, str) else len(c) for c in cells))
        if sum(needs) + 2 * (len(needs) - 1) <= max_width:
            return  # it fits as it is
        room = max_width - 2 * (len(needs) - 1) - sum(needs[i] for i in self.keep_columns)
        short = [i for i in range(len(needs)) if i not in self.keep_columns and i not in self.free_columns]
        free = [i for i in range(len(needs)) if i in self.free_columns and i not in self.keep_columns]
        widths = _share({i: needs[i] for i in short}, max(0, room - MIN_FREE_WIDTH * len(free)))
        widths.update(_share({i: needs[i] for i in free}, max(0, room - sum(widths.values()))))
        for i, column in enumerate(self.columns):
            column.width = needs[i] if i in self.keep_columns else max(1, widths[i])


def _share(needs: dict[int, int], budget: int) -> dict[int, int]:
    """``budget`` shared fairly: each column its need if it can, the widest ones cut to what is left."""
    out = {}
    order = sorted(needs, key=lambda i: needs[i])
    for k, i in enumerate(order):
        out[i] = min(needs[i], budget // (len(order) - k))
        budget -= out[i]
    return out


def _cell(value: Any) -> Any:
    text = plain(value) if isinstance(value, str) else value
    if isinstance(text, Text):
        text.no_wrap, text.overflow = True, "ellipsis"
    return text


# The narrowest a free-text column is cut to while the terminal leaves room for it.
MIN_FREE_WIDTH = 8


# Columns of ids and states, never cut to fit a terminal.
KEPT_COLUMNS = ("JOB", "STATE", "UID", "WORKER", "TASK", "ATTEMPT", "STATUS")


def table(
    *columns: str,
    title: str | None = None,
    free: tuple[str, ...] | None = None,
    keep: tuple[str, ...] | None = None,
) -> PlainTable:
    """A borderless table; every cell keeps to one line, cut with an ellipsis when too long.

    When the table is wider than the terminal the free-text columns (``free``; the last column
    by default) are cut first, and the ``keep`` columns (by default the first one and those named
    in ``KEPT_COLUMNS``: ids and states) never.
    """
    t = PlainTable(title=title, header_style="bold", box=None, pad_edge=False)
    free_names = (columns[-1],) if free is None else free
    keep_names = (columns[0], *KEPT_COLUMNS) if keep is None else keep
    t.free_columns = frozenset(i for i, c in enumerate(columns) if c in free_names)
    t.keep_columns = frozenset(i for i, c in enumerate(columns) if c in keep_names)
    for c in columns:
        t.add_column(c, overflow="ellipsis", no_wrap=True)
    return t


def watch(
    fetch: Callable[[], Any],
    show: Callable[[Any], Any],
    *,
    fmt: str,
    interval: float,
    done: Callable[[Any], bool] = lambda _data: False,
) -> None:
    """Show ``fetch()`` again every ``interval`` seconds until ``done`` or Ctrl-C.

    On a terminal a table is redrawn in place; elsewhere (and for JSON/YAML) a new snapshot is
    printed only when the data changed.
    """
    from rich.live import Live

    live_table = fmt in ("table", "wide") and console.is_terminal
    last: str | None = None
    try:
        if live_table:
            with Live(console=console, auto_refresh=False, transient=False) as live:
                while True:
                    data = fetch()
                    live.update(show(data), refresh=True)
                    if done(data):
                        return
                    time.sleep(interval)
        while True:
            data = fetch()
            key = json.dumps(_plain_data(data), sort_keys=True, default=str)
            if key != last:
                if last is not None and fmt in ("table", "wide"):
                    console.print()
                if fmt in ("table", "wide"):
                    console.print(show(data))
                else:
                    print_data(data, fmt)
                sys.stdout.flush()  # a reader of the pipe sees each change as it happens
                last = key
            if done(data):
                return
            time.sleep(interval)
    except KeyboardInterrupt:
        return


def resources_of(res: Any) -> str:
    """A ``ResourceSpec``-like record (cpu_millicores, memory_bytes, device) as one phrase."""
    return resources_text(res.cpu_millicores, res.memory_bytes, res.device)
