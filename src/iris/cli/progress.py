"""What ``iris job run`` shows while a job runs, and what Ctrl-C does.

The job id and its dashboard link come first (on stderr). The job's output streams to stdout and
stderr. When stderr is a terminal, a status line stays under the output: task counts by state,
the elapsed time, and why tasks are pending; on pipes and files there is nothing but the output.

Ctrl-C (or SIGTERM, or SIGHUP when the terminal goes away) stops the job after a short grace; a
second one within the grace detaches instead and
leaves the job running (``detach_ok``; with an embedded ``--local`` cluster there is nothing to
detach from, so the job stops at once).
"""

from __future__ import annotations

import signal
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterable
from typing import TYPE_CHECKING, TextIO

from rich.console import Console, Group
from rich.live import Live
from rich.spinner import Spinner
from rich.text import Text

from iris.cli.output import clean, err_console, line, safe_line
from iris.cli.text import terminal_safe
from iris.rpc.enums import JobState, TaskState
from iris.rpc.models import JobDetail, TaskStatus

if TYPE_CHECKING:
    from iris.client.job import Job

# Seconds between the first Ctrl-C and stopping the job: time to press Ctrl-C again and detach.
STOP_GRACE_S = 2.0
# Signals that act as Ctrl-C: a terminal closing (SIGHUP) or `kill` (SIGTERM) stops the job too.
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def stop_signals_interrupt() -> None:
    """Make SIGTERM and SIGHUP raise KeyboardInterrupt, as SIGINT does."""

    def _raise(*_: object) -> None:
        raise KeyboardInterrupt

    for sig in STOP_SIGNALS[1:]:
        signal.signal(sig, _raise)


_COUNT_ORDER = (
    TaskState.PENDING,
    TaskState.ASSIGNED,
    TaskState.BUILDING,
    TaskState.RUNNING,
    TaskState.SUCCEEDED,
    TaskState.FAILED,
    TaskState.KILLED,
    TaskState.WORKER_FAILED,
    TaskState.PREEMPTED,
    TaskState.UNSCHEDULABLE,
    TaskState.COSCHED_FAILED,
)


def dashboard_link(controller_url: str, job_id: str) -> str:
    """The dashboard's page of a job (its router takes ``#/jobs`` followed by the job id path)."""
    return f"{controller_url.rstrip('/')}/#/jobs{job_id}"


def task_counts_text(tasks: Iterable[TaskStatus]) -> str:
    """``2 running, 1 pending, 3 succeeded`` in life-cycle order."""
    counts = Counter(t.state for t in tasks)
    return ", ".join(f"{counts[s]} {s.value.lower()}" for s in _COUNT_ORDER if counts[s])


def pending_reason(detail: JobDetail) -> str | None:
    """Why the job's first waiting task is not running yet (None when none waits)."""
    for task in detail.tasks:
        if task.state in (TaskState.PENDING, TaskState.ASSIGNED) and task.pending_reason:
            return task.pending_reason
    return detail.pending_reason if detail.state is JobState.PENDING else None


def status_lines(detail: JobDetail, now: float) -> list[str]:
    """The live status: state, task counts and elapsed time; then the pending reason, if any."""
    elapsed = max(0.0, now - detail.submitted_at)
    counts = task_counts_text(detail.tasks) or "no tasks yet"
    lines = [f"{detail.state.value.lower()}  ·  {counts}  ·  {_elapsed(elapsed)}"]
    reason = pending_reason(detail)
    if reason:
        lines.append(f"pending: {reason}")
    return lines


def _elapsed(seconds: float) -> str:
    if seconds < 60:
        return f"{seconds:.0f}s"
    if seconds < 3600:
        return f"{seconds // 60:.0f}m{seconds % 60:02.0f}s"
    return f"{seconds // 3600:.0f}h{seconds % 3600 // 60:02.0f}m"


class LiveStatus:
    """A status that stays under the job's output on the terminal, erased when the job ends."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self._spinner = Spinner("dots", text=Text("submitted", style="dim"))
        self._reason = Text("", style="yellow")
        self._live = Live(
            Group(self._spinner, self._reason),
            console=console,
            transient=True,
            refresh_per_second=8,
            redirect_stdout=False,
            redirect_stderr=False,
        )

    def __enter__(self) -> LiveStatus:
        self._live.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._live.stop()

    def update(self, detail: JobDetail) -> None:
        lines = status_lines(detail, time.time())
        self._spinner.update(text=Text(lines[0], style="dim"))
        self._reason.plain = clean(lines[1]) if len(lines) > 1 else ""

    def write(self, text: str, stream: TextIO) -> None:
        """A line of job output: above the status when it goes to the same terminal, else as is."""
        if stream.isatty():
            self._live.console.print(Text.from_ansi(safe_line(text)), soft_wrap=True, highlight=False)
        else:
            _write(text, stream)


def _write(text: str, stream: TextIO) -> None:
    stream.write(safe_line(text) + "\n")
    stream.flush()


def follow_job(
    job: Job,
    *,
    controller_url: str,
    multi: bool,
    detach_ok: bool,
    console: Console = err_console,
    live: bool | None = None,
    show_dashboard: bool = True,
    raw: bool = False,
) -> int:
    """Announce the job, stream its output until it ends, and return the exit code to exit with.

    ``live`` forces the status line on or off (default: on when ``console`` is a terminal); the
    output's escapes other than colours are shown as text unless ``raw``.
    """
    try:  # from the first line on: a Ctrl-C at any point after the submit stops the job
        console.print(line(f"job {job.job_id}"))
        if show_dashboard:
            console.print(line(f"dashboard: {dashboard_link(controller_url, job.job_id)}"), soft_wrap=True)
        status = LiveStatus(console) if (console.is_terminal if live is None else live) else None
        if status is not None:
            with status:
                _stream(job, multi, status, raw)
        else:
            _stream(job, multi, None, raw)
    except KeyboardInterrupt:
        return _interrupted(job, console, detach_ok)
    detail = job.wait()
    code = job.exit_code()
    if detail.state is not JobState.SUCCEEDED:
        reason = detail.error or detail.state.value.lower()
        console.print(line((f"job {clean(job.job_id)} {detail.state_label()}", "red"), ": ", reason))
    return code


def _stream(job: Job, multi: bool, status: LiveStatus | None, raw: bool) -> None:
    """Every attempt's output in order; a line on stderr announces each retry."""
    from iris.cli.attempts import RetryAnnouncer, task_fetcher
    from iris.client.log_pages import task_path

    spec = job.detail(task_limit=0).spec.model_dump(mode="json")
    announcer = RetryAnnouncer(spec, task_fetcher(job.client.http.request, task_path(job.job_id)))
    for log_line in job.follow_all_attempts(on_detail=status.update if status is not None else None):
        note = announcer.see(log_line.task_index, log_line.attempt_number)
        if note is not None:
            _say(note, sys.stderr, status)
        if log_line.stream == "system":
            continue
        shown = log_line.line if raw else terminal_safe(log_line.line)
        text = f"[task {log_line.task_index}] {shown}" if multi else shown
        _say(text, sys.stderr if log_line.stream == "stderr" else sys.stdout, status)


def _say(text: str, stream: TextIO, status: LiveStatus | None) -> None:
    if status is not None:
        status.write(text, stream)
    else:
        _write(text, stream)


def _interrupted(job: Job, console: Console, detach_ok: bool) -> int:
    """First Ctrl-C: stop the job after the grace. Second Ctrl-C within it: detach."""
    if detach_ok:
        # The second Ctrl-C is caught by a handler installed before the prompt is printed, so it
        # counts however soon it comes (a KeyboardInterrupt could land before any try block).
        second = threading.Event()
        previous = {sig: signal.signal(sig, lambda *_: second.set()) for sig in STOP_SIGNALS}
        try:
            console.print(
                f"\nCtrl-C: stopping job {job.job_id} in {STOP_GRACE_S:g}s; "
                "press Ctrl-C again to detach and leave it running",
                highlight=False,
            )
            second.wait(STOP_GRACE_S)
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
        if second.is_set():
            console.print(
                f"detached: job {job.job_id} keeps running.\n"
                f"  follow it: iris job logs -f {job.job_id}\n"
                f"  stop it:   iris job stop {job.job_id}",
                highlight=False,
            )
            return 130
    console.print(f"stopping job {job.job_id}...", highlight=False)
    try:
        job.kill()
        detail = job.wait(timeout=30)
    except KeyboardInterrupt:
        console.print(f"not waiting for job {job.job_id} to stop", highlight=False)
        return 130
    console.print(f"job {job.job_id} {detail.state.value}", highlight=False)
    return 130
