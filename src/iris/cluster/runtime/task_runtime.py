"""The seam between the worker's attempt bookkeeping and what actually runs an attempt.

``SubprocessRuntime`` owns every attempt's life cycle (work dir, log, pipes, limits, pid records,
change feed). What runs the attempt's main process is a ``TaskRuntime``, picked per attempt:

- ``ProcessTaskRuntime``: the command itself, as a process group on the worker (today's path; its
  hooks are never called on the hot path, so a job with no image is exactly as fast as before);
- ``ContainerTaskRuntime`` (``container.py``): the command inside the job's image, run by the
  docker CLI (``docker run`` attached, so its output comes through the same pipes into the same
  attempt log).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from iris.rpc.models import RunSpec


@dataclass(frozen=True, slots=True)
class Launch:
    """What ``start`` needs to know about an attempt about to run."""

    spec: RunSpec
    argv: Sequence[str]
    env: Mapping[str, str]  # the IRIS_* task environment (attempt_env.build_attempt_env)
    work_dir: str
    task_uid: int | None = None  # the attempt's own uid under isolation
    device_env: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ExitFacts:
    """What the runtime learnt about an attempt's end beyond its main process's return code."""

    oom: bool = False
    message: str | None = None  # e.g. "out of memory: used 64.0 MB, limit 64.0 MB"
    exit_code: int | None = None  # the task's own exit code, when it differs from the launcher's
    # The task's end could not be learnt (an adopted container that ended unwatched): the attempt
    # is reported as killed by its infrastructure, and retried.
    lost: bool = False


@dataclass(frozen=True, slots=True)
class LeftAttempt:
    """An attempt still running after its worker daemon died (a container: the engine keeps it),
    found by a restarted worker to adopt."""

    attempt_uid: str
    name: str  # the container's
    job_id: str
    task_id: str
    work_dir: str
    memory_bytes: int = 0  # its memory limit (0: none)
    task_uid: int | None = None  # the uid it runs as (a root worker's per-attempt uid)
    started_at: float | None = None
    timeout_s: float | None = None
    masks: tuple[str, ...] = ()  # its secret values, masked in its log


@dataclass(frozen=True, slots=True)
class Adoption:
    """What a previous run of the worker left: attempts still running (to adopt) and what was removed."""

    running: tuple[LeftAttempt, ...] = ()
    removed: tuple[str, ...] = ()


class TaskRuntime(Protocol):
    name: str

    def needed(self, spec: RunSpec) -> bool:
        """True when this runtime runs ``spec``'s attempt."""
        ...

    def ready(self, spec: RunSpec) -> bool:
        """True when ``prepare`` would do nothing now (e.g. the image is known to be here): the
        attempt then starts on the starting call itself, with no BUILDING phase (the reconcile that
        starts it reports it RUNNING, with no extra report to the controller)."""
        ...

    def prepare(self, spec: RunSpec, log: Callable[[str], None]) -> None:
        """BUILDING: make the attempt runnable (e.g. have its image); raises PreparationError."""
        ...

    def start(self, launch: Launch) -> tuple[list[str], dict[str, str]]:
        """The argv and process environment of the attempt's main process."""
        ...

    def observe(self, attempt_uid: str, returncode: int) -> ExitFacts:
        """After the main process exited: how the attempt really ended."""
        ...

    def kill(self, attempt_uid: str, grace_s: float) -> None:
        """Stop what runs the attempt (beyond the main process's own tree)."""
        ...

    def exec_argv(self, attempt_uid: str, argv: Sequence[str]) -> list[str]:
        """The argv that runs ``argv`` beside the attempt (``iris job exec``)."""
        ...

    def exec_env(self, task_env: Mapping[str, str]) -> dict[str, str]:
        """The environment ``exec_argv`` runs with: the task's own, or (a runtime's tool run by
        the worker, such as the docker CLI) the worker's, never steered by the task's variables."""
        ...

    def process_status(self, attempt_uid: str) -> dict[str, Any]:
        """Extra facts for ``iris job ps`` (e.g. the container)."""
        ...

    def usage(self, attempt_uid: str) -> int | None:
        """Memory in use by the attempt where the process tree does not show it (None: unknown)."""
        ...

    def adopt(self, work_root: str) -> Adoption:
        """After a worker restart: what the previous run left still running (to adopt, see
        ``follow``); anything else it left is removed. Its attempts worked under ``work_root``."""
        ...

    def follow(self, left: LeftAttempt) -> tuple[list[str], dict[str, str]]:
        """The argv and environment of a process that streams an adopted attempt's whole output
        (stdout and stderr) and ends when the attempt ends."""
        ...

    def await_exit(self, left: LeftAttempt) -> None:
        """Start learning how the adopted attempt ends (``observe`` tells), right after ``follow``'s
        process has started."""
        ...

    def release(self, attempt_uid: str) -> None:
        """Free everything the attempt held (idempotent)."""
        ...


class ProcessTaskRuntime:
    """The attempt is its own process group on the worker (nothing beyond it to manage)."""

    name = "process"

    def needed(self, spec: RunSpec) -> bool:
        return spec.image is None

    def ready(self, spec: RunSpec) -> bool:
        return True

    def prepare(self, spec: RunSpec, log: Callable[[str], None]) -> None:
        return None

    def start(self, launch: Launch) -> tuple[list[str], dict[str, str]]:
        return list(launch.argv), dict(launch.env)

    def observe(self, attempt_uid: str, returncode: int) -> ExitFacts:
        return ExitFacts()

    def kill(self, attempt_uid: str, grace_s: float) -> None:
        return None

    def exec_argv(self, attempt_uid: str, argv: Sequence[str]) -> list[str]:
        return list(argv)

    def exec_env(self, task_env: Mapping[str, str]) -> dict[str, str]:
        return dict(task_env)

    def process_status(self, attempt_uid: str) -> dict[str, Any]:
        return {}

    def usage(self, attempt_uid: str) -> int | None:
        return None

    def adopt(self, work_root: str) -> Adoption:
        return Adoption()  # a process's pipes die with its daemon: nothing can be adopted

    def follow(self, left: LeftAttempt) -> tuple[list[str], dict[str, str]]:
        raise NotImplementedError("a process attempt cannot be adopted")

    def await_exit(self, left: LeftAttempt) -> None:
        raise NotImplementedError("a process attempt cannot be adopted")

    def release(self, attempt_uid: str) -> None:
        return None
