"""``iris job profile``: profile a running task with py-spy (cpu, threads) or memray (memory).

The profiler runs on the task's worker through the same path as ``iris job exec`` (authorised
the same way: the job's owner or an admin; as the task's own uid when tasks have their own uids),
using the py-spy and memray installed beside the worker daemon (``$IRIS_WORKER_BIN``), attached
to the task's process tree (``$IRIS_TASK_PID``, with its Python subprocesses).
"""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

import click

from iris.cli.context import CliError, Ctx, check_task, complete_job_id, job_id_of
from iris.cli.job_options import parse_duration

# Shell run beside the task: the profiler's own chatter goes to stderr, the profile to stdout.
_PID_CHECK = (
    'if [ -z "$IRIS_TASK_PID" ]; then echo "the task has no running process on its worker" >&2; exit 3; fi; '
)
_PREAMBLE = _PID_CHECK + "T=$(mktemp) || exit 1; trap 'rm -f \"$T\"' EXIT; "

_SCRIPTS = {
    "threads": _PID_CHECK + '"$IRIS_WORKER_BIN/py-spy" dump --pid "$IRIS_TASK_PID" --subprocesses',
    "cpu": (
        _PREAMBLE + '"$IRIS_WORKER_BIN/py-spy" record --pid "$IRIS_TASK_PID" --subprocesses --nonblocking '
        '--duration "$1" --format "$2" --output "$T" >&2 && cat "$T"'
    ),
    "memory": (
        _PREAMBLE
        + '"$IRIS_WORKER_BIN/memray" attach --duration "$1" --output "$T" --force "$IRIS_TASK_PID" >&2 '
        '&& sleep "$1" && sleep 2 && "$IRIS_WORKER_BIN/memray" stats "$T"'
    ),
}
TOP_N = 25


def top_functions(collapsed: str, limit: int = TOP_N) -> str:
    """A text profile from py-spy's collapsed stacks (``frame;frame;... count``): per function,
    the share of samples where it is on the stack (total) and on top (self)."""
    total_by: Counter[str] = Counter()
    self_by: Counter[str] = Counter()
    samples = 0
    for line in collapsed.splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        samples += count
        frames = stack.split(";")
        for frame in set(frames):
            total_by[frame] += count
        self_by[frames[-1]] += count
    if not samples:
        return "no samples: the task ran no Python code while it was profiled\n"
    out = [f"{samples} samples", f"{'TOTAL':>7} {'SELF':>7}  FUNCTION (FILE:LINE)"]
    for frame, count in total_by.most_common(limit):
        out.append(f"{100 * count / samples:6.1f}% {100 * self_by[frame] / samples:6.1f}%  {frame}")
    return "\n".join(out) + "\n"


@click.command("profile")
@click.argument("job_id", shell_complete=complete_job_id)
@click.option("--task", "task_index", default=0, show_default=True, type=int, help="Task index.")
@click.option(
    "--kind",
    type=click.Choice(["cpu", "threads", "memory"]),
    default="cpu",
    show_default=True,
    help="cpu: sample with py-spy; threads: every thread's stack now; memory: memray's allocation stats.",
)
@click.option("--duration", default="10s", show_default=True, help="How long to sample (cpu, memory).")
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["svg", "text"]),
    help="cpu: an SVG flame graph or the top functions as text (default: svg with -o, else text).",
)
@click.option(
    "-o", "--output", type=click.Path(dir_okay=False, path_type=Path), help="Write the profile here."
)
@click.pass_obj
def job_profile(
    obj: Ctx, job_id: str, task_index: int, kind: str, duration: str, fmt: str | None, output: Path | None
) -> None:
    """Profile a running task of JOB_ID with py-spy (cpu, threads) or memray (memory).

    \b
    Examples:
      iris job profile train --task 0                       # top functions over 10s
      iris job profile train --duration 30s -o flame.svg    # an SVG flame graph
      iris job profile train --kind threads                 # every thread's stack now
      iris job profile train --kind memory --duration 20s   # memray (needs memray in the task's Python)

    Worker backend only; the job's owner or an admin, as for exec.
    """
    from iris.client.log_pages import task_path
    from iris.rpc.enums import TaskState
    from iris.rpc.models import ExecRequest, ExecResponse

    try:
        seconds = parse_duration(duration)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--duration") from None
    if seconds > 600:
        raise click.BadParameter("profile for at most 10m", param_hint="--duration")
    fmt = fmt or ("svg" if output is not None and kind == "cpu" else "text")
    if fmt == "svg" and kind != "cpu":
        raise click.BadParameter("only --kind cpu makes an SVG (a flame graph)", param_hint="--format")
    spy_format = "flamegraph" if fmt == "svg" else "raw"
    script = _SCRIPTS[kind]
    argv = ["sh", "-c", script, "iris-profile", str(max(1, round(seconds))), spy_format]
    wait_s = (seconds if kind != "threads" else 0) + 60
    with obj.client() as client:
        handle = client.job(job_id_of(job_id, client))
        task = check_task(handle.detail(), task_index)
        if task.state is not TaskState.RUNNING:
            raise CliError(
                f"task {task_index} of {handle.job_id} is {task.state.value.lower()}, not running; "
                "only a running task can be profiled"
            )
        body = ExecRequest(argv=argv, timeout_s=wait_s)
        answer = client.http.request(
            "POST",
            f"/api/v1/tasks/{task_path(handle.job_id)}/{task_index}:exec",
            json_body=body,
            timeout=wait_s + 30,
        )
        result = ExecResponse.model_validate(answer)
    if result.exit_code != 0:
        detail = " ".join(result.stderr.split())[-600:] or f"exit code {result.exit_code}"
        if "python version" in detail.lower() or "not a python" in detail.lower():
            detail = f"the task is not running Python ({detail})"
        raise CliError(f"cannot profile task {task_index} of {handle.job_id}: {detail}")
    text = result.stdout
    if kind == "cpu" and fmt == "text":
        text = top_functions(text)
    if output is not None:
        output.write_text(text)
        click.echo(f"wrote {output} ({len(text)} bytes)", err=True)
    else:
        sys.stdout.write(text)
