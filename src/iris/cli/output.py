"""Rendering for people (rich tables) and for scripts (--json)."""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any

from pydantic import BaseModel
from rich.console import Console
from rich.table import Table

from iris.rpc.units import format_bytes, format_cpu


def _width(stream: object) -> int | None:
    """Terminals report their width; for pipes and files use $COLUMNS or a wide default, not 80."""
    if getattr(stream, "isatty", lambda: False)():
        return None
    return int(os.environ.get("COLUMNS", "200"))


console = Console(soft_wrap=True, width=_width(sys.stdout))
err_console = Console(stderr=True, soft_wrap=True, width=_width(sys.stderr))

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


def print_json(data: Any) -> None:
    if isinstance(data, BaseModel):
        sys.stdout.write(data.model_dump_json(indent=2) + "\n")
    else:
        sys.stdout.write(json.dumps(data, indent=2, default=str) + "\n")


def styled(state: str) -> str:
    style = STATE_STYLE.get(state)
    return f"[{style}]{state}[/{style}]" if style else state


def ago(ts: float | None) -> str:
    if ts is None:
        return "-"
    delta = max(0.0, time.time() - ts)
    if delta < 60:
        return f"{delta:.0f}s ago"
    if delta < 3600:
        return f"{delta / 60:.0f}m ago"
    if delta < 86400:
        return f"{delta / 3600:.1f}h ago"
    return f"{delta / 86400:.1f}d ago"


def duration(start: float | None, end: float | None) -> str:
    if start is None:
        return "-"
    seconds = (end or time.time()) - start
    if seconds < 60:
        return f"{seconds:.1f}s"
    if seconds < 3600:
        return f"{seconds / 60:.1f}m"
    return f"{seconds / 3600:.1f}h"


def resources_text(cpu_millicores: int, memory_bytes: int) -> str:
    return f"{format_cpu(cpu_millicores)} cpu, {format_bytes(memory_bytes)}"


def table(*columns: str, title: str | None = None) -> Table:
    """A borderless table; every column but the last keeps to one line, the last one folds."""
    t = Table(title=title, header_style="bold", box=None, pad_edge=False)
    for i, c in enumerate(columns):
        last = i == len(columns) - 1
        t.add_column(c, overflow="fold" if last else "ellipsis", no_wrap=not last)
    return t
