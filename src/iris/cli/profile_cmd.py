"""``iris job profile``: profile a running task with py-spy (cpu, threads) or memray (memory).

The profiler runs on the task's worker through the same path as ``iris job exec`` (authorised
the same way: the job's owner or an admin; as the task's own uid when tasks have their own uids),
using the py-spy and memray installed beside the worker daemon (``$IRIS_WORKER_BIN``), attached
to the task's process tree (``$IRIS_TASK_PID``, with its Python subprocesses).
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

from iris.cli.context import CliError, Ctx, check_running_task, complete_job_id, job_id_of
from iris.cli.job_options import parse_duration
from iris.cluster.runtime.profiling import (
    MAX_PROFILE_S,
    exec_timeout,
    failure_sentence,
    profile_argv,
    top_functions,
)


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

    Process and container tasks on workers (py-spy from the worker's installation) and pods on
    Kubernetes (the image's own py-spy); the job's owner or an admin, as for exec.
    """
    from iris.client.log_pages import task_path
    from iris.rpc.models import ExecRequest, ExecResponse, ProfileRequest

    try:
        seconds = parse_duration(duration)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--duration") from None
    if seconds > MAX_PROFILE_S:
        raise click.BadParameter("profile for at most 10m", param_hint="--duration")
    fmt = fmt or ("svg" if output is not None and kind == "cpu" else "text")
    if fmt == "svg" and kind != "cpu":
        raise click.BadParameter("only --kind cpu makes an SVG (a flame graph)", param_hint="--format")
    argv = profile_argv(kind, seconds, fmt)  # type: ignore[arg-type]
    wait_s = exec_timeout(kind, seconds)  # type: ignore[arg-type]
    with obj.client() as client:
        handle = client.job(job_id_of(job_id, client))
        check_running_task(handle.detail(), task_index, "only a running task can be profiled")
        profile = ProfileRequest(kind=kind, duration_s=seconds, format=fmt)  # type: ignore[arg-type]
        body = ExecRequest(argv=argv, timeout_s=wait_s, profile=profile)
        answer = client.http.request(
            "POST",
            f"/api/v1/tasks/{task_path(handle.job_id)}/{task_index}:exec",
            json_body=body,
            timeout=wait_s + 30,
        )
        result = ExecResponse.model_validate(answer)
    if result.exit_code != 0:
        detail = failure_sentence(result.stderr, result.exit_code)
        raise CliError(f"cannot profile task {task_index} of {handle.job_id}: {detail}")
    text = result.stdout
    if kind == "cpu" and fmt == "text":
        text = top_functions(text)
    if output is not None:
        output.write_text(text)
        click.echo(f"wrote {output} ({len(text)} bytes)", err=True)
    else:
        sys.stdout.write(text)
