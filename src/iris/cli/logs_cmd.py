"""`iris job logs`, `iris job summary`, `iris job wait` and the failure block of `iris job status`.

Logs are read from the controller's log store, filtered there (tail, time window, grep), so a
tail of a huge log costs what it prints, and they are there after the worker is gone. Streaming
lines needs no tables: rich is imported only by the commands that draw them.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import click

from iris.cli.context import Ctx, complete_job_id, job_id_of, no_such_task
from iris.cli.text import duration, parse_since, safe_line, strip_ansi, terminal_safe
from iris.client.log_pages import log_pages, task_path
from iris.rpc.enums import TERMINAL_JOB_STATES

if TYPE_CHECKING:
    from iris.rpc.models import JobDetail


def collapse_progress(text: str) -> str:
    """A line a progress bar rewrote with ``\r``: what it last showed."""
    parts = [p for p in text.split("\r") if p]
    return parts[-1] if parts else ""


def _prefix(line: dict[str, Any], job_id: str, children: bool) -> str:
    if not children:
        return f"[task {line['task_index']}] "
    relative = str(line["task_id"]).removeprefix(job_id).lstrip("/")
    return f"[{relative}] "


def write_line(
    entry: dict[str, Any], *, prefix: str, timestamps: bool, color: bool, raw: bool = False
) -> None:
    """One stored log line (as the API answers it), never interpreted as markup, stderr lines to
    stderr: colours kept (``color``) and every other escape or control shown as text, or with
    ``raw`` the bytes as the task wrote them."""
    if raw:
        text = entry["line"] if color else strip_ansi(entry["line"])
    else:
        text = terminal_safe(entry["line"], color=color)
    if timestamps:
        stamp = datetime.fromtimestamp(entry["ts"], UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        text = f"{stamp} {text}"
    stream = sys.stderr if entry["stream"] == "stderr" else sys.stdout
    stream.write(safe_line(prefix + text) + "\n")


def print_failures(detail: JobDetail, *, limit: int = 5) -> None:
    """For each failed task (at most ``limit``): why, the numbers, the exception and the log tail."""
    from iris.cli.output import console, line

    failed = [t for t in detail.tasks if t.failure is not None]
    for task in failed[:limit]:
        failure = task.failure
        if failure is None:
            continue
        console.print()
        console.print(
            line(
                (f"task {task.task_index} failed", "red"),
                f" ({failure.kind.replace('_', ' ')}): ",
                failure.summary,
            )
        )
        if failure.exception and failure.exception not in failure.summary:
            console.print(line("  exception: ", failure.exception))
        if failure.log_tail:
            console.print(f"  last {len(failure.log_tail)} log lines:")
            for text in failure.log_tail:
                console.print(line("    ", collapse_progress(text)))
    if len(failed) > limit:
        console.print(f"\n... and {len(failed) - limit} more failed tasks (iris job summary shows all)")
    sys.stdout.flush()


@click.command("logs")
@click.argument("job_id", shell_complete=complete_job_id)
@click.option("-f", "--follow", is_flag=True, help="Keep printing new lines until the job ends.")
@click.option("--task", "tasks", type=int, multiple=True, help="Only this task index (repeatable).")
@click.option(
    "--since", metavar="WHEN", help="Only lines from the last 5m, 1h, 2d..., or since a time (ISO 8601)."
)
@click.option(
    "--tail",
    type=click.IntRange(min=0, max=100_000),
    metavar="N",
    help="Only the last N lines of each task (then new ones with -f).",
)
@click.option(
    "--grep",
    metavar="PATTERN",
    help="Only lines matching this regular expression (RE2 syntax: no backreferences or lookarounds).",
)
@click.option("-i", "--ignore-case", is_flag=True, help="With --grep: ignore case.")
@click.option("--timestamps", is_flag=True, help="Start every line with its time (UTC, ISO 8601).")
@click.option(
    "--attempt",
    metavar="N|all",
    help="Attempt number N (0 is the first) or all (default: the current one).",
)
@click.option("--include-children", is_flag=True, help="Also the logs of the job's sub-jobs.")
@click.option("--system", "include_system", is_flag=True, help="Also Iris's own lines (start, exit, kills).")
@click.option(
    "--color/--no-color",
    default=True,
    help="Keep the output's ANSI colour codes (default) or strip them.",
)
@click.option(
    "--raw",
    is_flag=True,
    help="Print lines exactly as the task wrote them, terminal escapes included (only for output you "
    "trust, such as your own). By default other escapes and control characters are shown as \\x1b, \\r....",
)
@click.pass_obj
def job_logs(
    obj: Ctx,
    job_id: str,
    follow: bool,
    tasks: Sequence[int],
    since: str | None,
    tail: int | None,
    grep: str | None,
    ignore_case: bool,
    timestamps: bool,
    attempt: str | None,
    include_children: bool,
    include_system: bool,
    color: bool,
    raw: bool,
) -> None:
    """Print a job's output from the controller (also after its worker is gone): every task's
    lines interleaved by time, with a [task N] prefix when there are several tasks."""
    try:
        since_ts = parse_since(since, time.time()) if since else None
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--since") from None
    if attempt is not None and attempt != "all" and not attempt.isdigit():
        raise click.BadParameter("expected a number or 'all'", param_hint="--attempt")
    if "/" in job_id:
        full_id = job_id_of(job_id)
    else:  # a bare name: the controller is asked which job (the SDK's client, rarely needed)
        with obj.client() as client:
            full_id = job_id_of(job_id, client)
    # Plain JSON, not the SDK's models: the command then starts without pydantic.
    with obj.http() as http:
        detail = http.request("GET", f"/api/v1/jobs/{task_path(full_id)}", params={"task_limit": 0})
        canonical, replicas = str(detail["job_id"]), int(detail["replicas"])
        for index in tasks:
            if not 0 <= index < replicas:
                raise no_such_task(canonical, replicas, index)
        multi = include_children or (replicas > 1 and len(tasks) != 1)
        filters: dict[str, Any] = {
            "since": since_ts,
            "grep": grep,
            "ignore_case": ignore_case,
            "tasks": list(tasks) or None,
            "attempt": attempt,
            "include_children": include_children,
            "include_system": include_system,
        }
        announcer = None
        if follow and attempt is None and tail is None and not include_children:
            # Following from the start: every attempt in order, each retry announced on stderr.
            from iris.cli.attempts import RetryAnnouncer, task_fetcher

            filters.update(attempt="all", include_system=True)
            announcer = RetryAnnouncer(detail["spec"], task_fetcher(http.request, task_path(canonical)))
        try:
            for page in log_pages(http, canonical, follow=follow, tail=tail, **filters):
                for line in page["lines"]:
                    if announcer is not None:
                        note = announcer.see(line["task_index"], line["attempt_number"])
                        if note is not None:
                            sys.stdout.flush()
                            sys.stderr.write(note + "\n")
                            sys.stderr.flush()
                        if line["stream"] == "system" and not include_system:
                            continue
                    prefix = _prefix(line, canonical, include_children) if multi else ""
                    write_line(line, prefix=prefix, timestamps=timestamps, color=color, raw=raw)
                sys.stdout.flush()
        except KeyboardInterrupt:
            sys.stdout.flush()
            sys.exit(130)  # as every command stopped by Ctrl-C


@click.command("summary")
@click.argument("job_id", shell_complete=complete_job_id)
@click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")
@click.pass_obj
def job_summary(obj: Ctx, job_id: str, as_json: bool) -> None:
    """Per task (like sacct): state, exit code, attempts, duration, CPU time, peak memory
    against the limit, and the worker it ran on."""
    with obj.client() as client:
        summary = client.job(job_id_of(job_id, client)).summary()
    from iris.cli.output import clean, console, line, print_json, styled, table
    from iris.rpc.units import format_bytes

    if as_json:
        print_json(summary)
        return
    console.print(line((clean(summary.job_id), "bold"), "  ", styled(summary.state)))
    t = table(
        "TASK",
        "STATE",
        "EXIT",
        "ATTEMPTS",
        "DURATION",
        "CPU TIME",
        "PEAK MEM / LIMIT",
        "WORKER",
        "REASON",
    )
    for task in summary.tasks:
        peak = format_bytes(task.peak_rss_bytes) if task.peak_rss_bytes else "-"
        limit = format_bytes(task.memory_limit_bytes) if task.memory_limit_bytes else "-"
        cpu = f"{task.cpu_seconds:.1f}s" if task.cpu_seconds is not None else "-"
        t.add_row(
            str(task.task_index),
            styled(task.state),
            "" if task.exit_code is None else str(task.exit_code),
            str(task.attempts),
            duration(task.started_at, task.finished_at) if task.started_at else "-",
            cpu,
            f"{peak} / {limit}",
            task.worker_id or "-",
            task.failure.summary if task.failure else "",
        )
    console.print(t)


@click.command("wait")
@click.argument("job_id", shell_complete=complete_job_id)
@click.option("--timeout", type=float, metavar="SECONDS", help="Give up (exit 124) after this long.")
@click.pass_obj
def job_wait(obj: Ctx, job_id: str, timeout: float | None) -> None:
    """Block until the job ends, then exit with its exit code (0 when it succeeded)."""
    from iris.cli.output import err_console, styled

    deadline = None if timeout is None else time.monotonic() + timeout
    with obj.client() as client:
        handle = client.job(job_id_of(job_id, client))
        delay = 0.05
        while True:
            detail = handle.detail()
            if detail.state in TERMINAL_JOB_STATES:
                break
            if deadline is not None and time.monotonic() >= deadline:
                err_console.print(
                    f"{detail.job_id} is still {detail.state.value.lower()} after {timeout:g}s",
                    highlight=False,
                )
                sys.exit(124)
            time.sleep(delay)
            delay = min(1.0, delay * 1.5)
        code = handle.exit_code()
    err_console.print(f"{detail.job_id}: {styled(detail.state.value)} (exit code {code})", highlight=False)
    sys.exit(code)
