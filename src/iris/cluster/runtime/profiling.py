"""Profiling a running task with py-spy (cpu, threads) or memray (memory): the shell command run
beside the task through the exec path (``iris job profile`` and the controller's ``:profile``
route both build it here), and a text summary of py-spy's collapsed stacks."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Literal

Kind = Literal["cpu", "threads", "memory"]
Format = Literal["svg", "text"]
MAX_PROFILE_S = 600.0

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


def profile_argv(kind: Kind, seconds: float, fmt: Format) -> list[str]:
    """The command to exec beside the task (``$IRIS_TASK_PID``, ``$IRIS_WORKER_BIN`` are set by the runtime)."""
    spy_format = "flamegraph" if fmt == "svg" else "raw"
    return ["sh", "-c", _SCRIPTS[kind], "iris-profile", str(max(1, round(seconds))), spy_format]


def pod_profile_argv(kind: Kind, seconds: float, fmt: Format) -> list[str]:
    """The same profile run inside a pod (Kubernetes exec): the task is the container's PID 1 and
    the profiler is the image's own (``py-spy``, or ``memray`` for ``memory``, on its PATH)."""
    tool = "memray" if kind == "memory" else "py-spy"
    find = (
        f"B=$(command -v {tool}) || {{ echo \"{tool} is not installed in the task's image "
        f'(pip install {tool} there to profile its pods)" >&2; exit 3; }}; '
        'IRIS_WORKER_BIN=$(dirname "$B"); IRIS_TASK_PID=1; '
    )
    argv = profile_argv(kind, seconds, fmt)
    return [argv[0], argv[1], find + argv[2], *argv[3:]]


def exec_timeout(kind: Kind, seconds: float) -> float:
    return (seconds if kind != "threads" else 0) + 60


def failure_sentence(stderr: str, exit_code: int) -> str:
    """Why the profiler failed, in one line."""
    detail = " ".join(stderr.split())[-600:] or f"exit code {exit_code}"
    if "python version" in detail.lower() or "not a python" in detail.lower():
        detail = f"the task is not running Python ({detail})"
    return detail


# An engine's --init process (docker-init is tini): the task is its child.
_INIT_NAMES = {"docker-init", "tini", "catatonit", "dumb-init"}


def container_task_pid(init_pid: int, proc: Path = Path("/proc")) -> int:
    """The host pid of a container's task process: its init's first child when the engine put an
    init in front of it, else the init itself; 0 when the container is not running."""
    if init_pid <= 0:
        return 0
    try:
        name = (proc / str(init_pid) / "comm").read_text().strip()
        if name not in _INIT_NAMES:
            return init_pid
        children = (proc / str(init_pid) / "task" / str(init_pid) / "children").read_text().split()
    except OSError:
        return 0
    return int(children[0]) if children else 0
