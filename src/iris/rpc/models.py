"""Wire models shared by the controller, workers, the SDK and the CLI (pydantic v2).

Specs accept friendly input (``ResourceSpec(cpu=1, memory="2GB")``) and hold canonical
integers: cpu in millicores, memory and disk in bytes.
"""

from __future__ import annotations

import base64
import os
import re
import sys
import sysconfig
import types
from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated, Any, Literal, cast

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from iris.rpc.enums import (
    ConstraintOp,
    JobState,
    PriorityBand,
    StopReason,
    TaskState,
    WorkerStatus,
)
from iris.rpc.result_limits import MAX_RESULT_BYTES, MAX_TRACEBACK_CHARS
from iris.rpc.units import parse_bytes, parse_cpu_millicores


class WireModel(BaseModel):
    # NaN and Infinity are never meaningful quantities, durations or times on the wire.
    model_config = ConfigDict(extra="forbid", frozen=False, allow_inf_nan=False)


# A process's argv and environment share the kernel's ARG_MAX (2 MiB on Linux); a task's own
# command line and variables may use half, leaving room for what the runtime adds.
MAX_ARGV_ENV_BYTES = 1 << 20
# The kernel refuses any one argv or environment string (``KEY=value`` with its NUL) over 128 KiB
# (MAX_ARG_STRLEN): such a task could be accepted but never start.
MAX_ARG_STRING_BYTES = 128 * 1024
# Pip requirement specifiers: a name, extras, version pins and markers; never an option.
MAX_PIP_PACKAGES = 256


def _check_text(what: str, value: str) -> None:
    if "\0" in value:
        raise ValueError(f"{what} contains a NUL character, which no process can receive")


def _utf8_size(text: str) -> int:
    """Bytes of ``text`` as the kernel receives it (ASCII, the common case, without encoding it)."""
    return len(text) if text.isascii() else len(text.encode("utf-8", "surrogateescape"))


def _variable_size(key: str, value: str) -> int:
    """``KEY=value`` with its NUL, in bytes: what one variable takes of the kernel's limits."""
    return _utf8_size(key) + _utf8_size(value) + 2


def _check_env(env: dict[str, str]) -> dict[str, str]:
    total = 0
    for key, value in env.items():
        if not key or "=" in key or "\0" in key:
            raise ValueError(f"bad environment variable name {key!r}")
        _check_text(f"environment variable {key}", value)
        size = _variable_size(key, value)
        if size > MAX_ARG_STRING_BYTES:
            raise ValueError(
                f"environment variable {key} is {size} bytes, over the {MAX_ARG_STRING_BYTES} bytes"
                " (128 KiB) the kernel lets one variable hold; pass large values in a file"
            )
        total += size
    if total > MAX_ARGV_ENV_BYTES:
        raise ValueError(
            f"the environment is {total} bytes, over the {MAX_ARGV_ENV_BYTES}-byte (1 MiB) limit"
            " for all of a job's variables together; pass large values in a file"
        )
    return env


# ---------------------------------------------------------------- specs


class DeviceSpec(WireModel):
    """An accelerator request or offer: ``DeviceSpec(type="gpu", variant="a100", count=2)``."""

    type: str = Field(min_length=1, max_length=64)
    variant: str = Field(default="", max_length=64)
    count: int = Field(default=1, ge=0, le=1024)


class ResourceSpec(WireModel):
    """Resources of a task (requests) or a worker (capacity)."""

    cpu_millicores: int = Field(default=1000, ge=0, le=10_000_000)
    memory_bytes: int = Field(default=512 * 1000**2, ge=0, le=1 << 50)
    disk_bytes: int = Field(default=0, ge=0, le=1 << 56)
    device: DeviceSpec | None = None

    @model_validator(mode="before")
    @classmethod
    def _friendly(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        data = dict(cast("dict[str, Any]", data))  # the request's JSON object
        if "cpu" in data:
            data["cpu_millicores"] = parse_cpu_millicores(data.pop("cpu"))
        if "memory" in data:
            data["memory_bytes"] = parse_bytes(data.pop("memory"))
        if "disk" in data:
            data["disk_bytes"] = parse_bytes(data.pop("disk"))
        return data

    if TYPE_CHECKING:  # cpu=/memory=/disk= for type checkers; a real __init__ would make pydantic-core
        # call back into Python for every nested ResourceSpec it parses

        def __init__(self, **data: Any) -> None: ...

    @property
    def cpu(self) -> float:
        return self.cpu_millicores / 1000


class Entrypoint(WireModel):
    """What a task runs: a command line, or a pickled Python callable."""

    kind: Literal["command", "callable"]
    argv: list[str] = Field(default_factory=list, max_length=10_000)
    callable_b64: str | None = None

    @model_validator(mode="after")
    def _check(self) -> Entrypoint:
        if self.kind == "command" and not self.argv:
            raise ValueError("the command is empty: give a program to run")
        total = 0
        for arg in self.argv:
            _check_text("the command", arg)
            size = _utf8_size(arg) + 1
            if size > MAX_ARG_STRING_BYTES:
                raise ValueError(
                    f"one argument of the command is {size} bytes, over the"
                    f" {MAX_ARG_STRING_BYTES} bytes (128 KiB) the kernel lets one argument hold"
                )
            total += size
        if total > MAX_ARGV_ENV_BYTES:
            raise ValueError(f"the command line is over {MAX_ARGV_ENV_BYTES} bytes")
        if self.kind == "callable" and not self.callable_b64:
            raise ValueError("a callable entrypoint needs its pickled payload")
        return self

    @classmethod
    def from_command(cls, *argv: str) -> Entrypoint:
        if len(argv) == 1 and isinstance(argv[0], list | tuple):
            argv = tuple(argv[0])
        return cls(kind="command", argv=[str(a) for a in argv])

    @classmethod
    def from_callable(cls, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Entrypoint:
        """Pickle ``fn`` with its arguments; the user's own modules travel by value."""
        import cloudpickle

        module = sys.modules.get(getattr(fn, "__module__", "") or "")
        by_value = module if module is not None and _is_user_module(module) else None
        if by_value is not None:
            cloudpickle.register_pickle_by_value(by_value)
        try:
            payload = cloudpickle.dumps((fn, args, kwargs))
        finally:
            if by_value is not None:
                cloudpickle.unregister_pickle_by_value(by_value)
        return cls(kind="callable", callable_b64=base64.b64encode(payload).decode("ascii"))

    def describe(self) -> str:
        if self.kind == "command":
            return " ".join(self.argv)
        return "<python callable>"


def _is_user_module(module: types.ModuleType) -> bool:
    """True for the user's own code (not installed packages, the stdlib, or Iris itself)."""
    name = module.__name__
    if name == "__main__" or name.split(".")[0] == "iris":
        return False
    path = getattr(module, "__file__", None)
    if not path:
        return False
    installed = {sysconfig.get_paths()[k] for k in ("stdlib", "platstdlib", "purelib", "platlib")}
    return not any(os.path.abspath(path).startswith(os.path.abspath(p) + os.sep) for p in installed)


class Constraint(WireModel):
    """A condition on worker attributes: ``Constraint(key="zone", op="EQ", value="a")``."""

    key: str = Field(min_length=1, max_length=128)
    op: ConstraintOp = ConstraintOp.EQ
    value: str | None = None
    values: list[str] = Field(default_factory=list)

    @model_validator(mode="after")
    def _check(self) -> Constraint:
        if self.op in (ConstraintOp.EXISTS, ConstraintOp.NOT_EXISTS):
            return self
        if self.op is ConstraintOp.IN:
            if not self.values:
                raise ValueError(f"constraint {self.key} IN needs a list of values")
            return self
        if self.value is None:
            raise ValueError(f"constraint {self.key} {self.op} needs a value")
        if self.op in (ConstraintOp.GT, ConstraintOp.GE, ConstraintOp.LT, ConstraintOp.LE):
            try:
                float(self.value)
            except ValueError:
                raise ValueError(
                    f"constraint {self.key} {self.op} needs a number, got {self.value!r}"
                ) from None
        return self

    def describe(self) -> str:
        if self.op is ConstraintOp.EXISTS:
            return f"{self.key} exists"
        if self.op is ConstraintOp.NOT_EXISTS:
            return f"{self.key} does not exist"
        if self.op is ConstraintOp.IN:
            return f"{self.key} in {{{', '.join(self.values)}}}"
        symbol = {"EQ": "=", "NE": "!=", "GT": ">", "GE": ">=", "LT": "<", "LE": "<="}[self.op.value]
        return f"{self.key}{symbol}{self.value}"


class CoschedulingConfig(WireModel):
    """Place every task of the job at once, on workers sharing the value of ``group_by``."""

    group_by: str = Field(min_length=1, max_length=128)


_URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")
_PROJECT = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?\s*(?:\[[A-Za-z0-9._,\s-]*\])?")
_ARCHIVES = (".whl", ".zip", ".tar", ".tar.gz", ".tgz", ".tar.bz2", ".tbz", ".tar.xz", ".txz", ".egg")


def is_local_requirement(text: str) -> bool:
    """Whether a requirement names something on the building machine (a path, a ``file:`` URL, an
    archive): installing it would run whatever code lies there. Allowed are project names with
    versions/markers, and remote URLs (``name @ https://...``, ``git+https://...``)."""
    text = text.strip()
    if "file:" in text.lower():
        return True
    project = _PROJECT.match(text)
    if project is not None:
        name = text[: project.end()].split("[")[0].strip().lower()
        rest = text[project.end() :].lstrip()
        if rest.startswith("@"):  # a direct reference: must be a remote URL
            return _URL.match(rest[1:].split(";")[0].strip()) is None
        if not rest or rest[0] in "<>=!~;(,":
            return name.endswith(_ARCHIVES)
    if _URL.match(text) is not None:
        return False
    return text.startswith((".", "~")) or "/" in text or "\\" in text or text.lower().endswith(_ARCHIVES)


_EXTRA_NAME = r"^[A-Za-z0-9](?:[A-Za-z0-9._-]{0,126}[A-Za-z0-9])?$"


class EnvironmentSpec(WireModel):
    pip_packages: list[str] = Field(default_factory=list, max_length=MAX_PIP_PACKAGES)
    env_vars: dict[str, str] = Field(default_factory=dict)
    # The project environment: ``uv sync --frozen`` of the workspace's pyproject.toml + uv.lock
    # (the bundle must hold both), with these optional-dependency groups; built once per lock,
    # Python and extras on each machine. The pip packages, if any, are installed on top.
    project: bool = False
    extras: list[Annotated[str, Field(pattern=_EXTRA_NAME)]] = Field(default_factory=list, max_length=64)

    @model_validator(mode="after")
    def _extras_need_project(self) -> EnvironmentSpec:
        if self.extras and not self.project:
            raise ValueError("extras select parts of the project environment: they need project=True")
        return self

    @field_validator("pip_packages")
    @classmethod
    def _requirements_only(cls, packages: list[str]) -> list[str]:
        """Each entry is one requirement; an option (``--index-url``, ``-e``) would steer the installer."""
        for package in packages:
            text = package.strip()
            if not text or len(text) > 512:
                raise ValueError(f"bad pip package {package!r}: give a requirement such as numpy==2.1")
            if text.startswith("-") or any(c in text for c in "\0\n\r"):
                raise ValueError(f"pip package {package!r} is not a requirement (options are not accepted)")
            if is_local_requirement(text):
                raise ValueError(
                    f"pip package {package!r} is a local path: only package names and remote URLs can be "
                    "installed (ship local code in the job's workspace instead)"
                )
        return packages

    @field_validator("env_vars")
    @classmethod
    def _env(cls, env: dict[str, str]) -> dict[str, str]:
        return _check_env(env)


# An image reference as docker accepts it: [registry/]name[:tag][@digest], no spaces or options.
IMAGE_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._/:@+-]*$"
ImagePullPolicy = Literal["if-not-present", "always", "never"]
SECRET_NAME_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]{0,127}$"
ENV_NAME_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]{0,255}$"
MAX_SECRET_BYTES = 64 * 1024


class SecretRef(WireModel):
    """A job's use of one of its user's secrets: injected as ``env`` (default: the secret's name)."""

    name: str = Field(pattern=SECRET_NAME_PATTERN)
    env: str | None = Field(default=None, pattern=ENV_NAME_PATTERN)

    @property
    def env_name(self) -> str:
        return self.env or self.name


class JobSpec(WireModel):
    """Everything a user says about a job when submitting it."""

    name: str = Field(min_length=1, max_length=255)
    entrypoint: Entrypoint
    resources: ResourceSpec = Field(default_factory=ResourceSpec)
    replicas: int = Field(default=1, ge=1, le=100_000)
    env: dict[str, str] = Field(default_factory=dict)
    environment: EnvironmentSpec | None = None
    constraints: list[Constraint] = Field(default_factory=list[Constraint], max_length=64)
    # Soft constraints: workers satisfying more of them are chosen first; never a reason to wait.
    preferences: list[Constraint] = Field(default_factory=list[Constraint], max_length=64)
    coscheduling: CoschedulingConfig | None = None
    max_retries_failure: int = Field(default=0, ge=0, le=10_000)
    max_retries_preemption: int = Field(default=100, ge=0, le=100_000)
    max_task_failures: int = Field(default=0, ge=0)
    timeout_s: float | None = Field(default=None, gt=0)
    scheduling_timeout_s: float | None = Field(default=None, gt=0)
    priority: PriorityBand = PriorityBand.INTERACTIVE
    user: str | None = Field(default=None, max_length=64)
    parent_job_id: str | None = None
    ports: list[str] = Field(default_factory=list)
    bundle_id: str | None = None
    # What to do when a job of this name exists: refuse (a live job is always refused), replace
    # it if it has finished (its tasks, attempts and events go with it), or keep it and return its id.
    existing_job_policy: Literal["error", "replace", "keep"] = "error"
    # Queue the job even when no registered worker and no scale group could ever run it (workers
    # that fit are expected to join); without it such a job is refused at submission.
    wait_for_capacity: bool = False
    # A container image to run each task in (worker: the docker CLI; Kubernetes: the pod's image).
    # None: the cluster's default task image, else a plain process on the worker.
    image: str | None = Field(default=None, min_length=1, max_length=512, pattern=IMAGE_PATTERN)
    image_pull_policy: ImagePullPolicy = "if-not-present"
    # The user's secrets (by name; never their values) injected into every task's environment.
    secrets: list[SecretRef] = Field(default_factory=list[SecretRef], max_length=64)

    @field_validator("env")
    @classmethod
    def _env_keys(cls, env: dict[str, str]) -> dict[str, str]:
        return _check_env(env)

    @field_validator("secrets")
    @classmethod
    def _secret_envs(cls, secrets: list[SecretRef]) -> list[SecretRef]:
        seen: set[str] = set()
        for ref in secrets:
            if ref.env_name in seen:
                raise ValueError(f"two secrets are injected as {ref.env_name}")
            seen.add(ref.env_name)
        return secrets


# ---------------------------------------------------------------- status views


class AttemptStatus(WireModel):
    attempt_number: int
    attempt_uid: str
    state: TaskState
    worker_id: str | None = None
    worker_address: str | None = None
    created_at: float
    started_at: float | None = None
    finished_at: float | None = None
    exit_code: int | None = None
    error: str | None = None
    # What the runtime last said about it (e.g. why its pod is still pending); not an error.
    message: str | None = None


# The exit code of a task stopped at its execution timeout, as timeout(1) and Slurm's TIMEOUT use.
TIMEOUT_EXIT_CODE = 124
# Failure kinds the CLI and dashboard show beside a failed job's state, e.g. ``FAILED (TIMEOUT)``.
SHOWN_FAILURE_KINDS = frozenset({"timeout", "oom", "disk", "environment"})
# Runtimes start the error of an attempt whose environment (pip packages, ``uv sync`` of the
# project) could not be built with this: the controller's failure kind "environment".
ENVIRONMENT_ERROR_PREFIX = "environment: "


class FailureInfo(WireModel):
    """Why a task failed, in one place."""

    kind: Literal[
        "exit_code",
        "oom",
        "timeout",
        "worker_lost",
        "preempted",
        "command_not_found",
        "killed",
        "unschedulable",
        "gang_failed",
        "start_failed",
        "image",
        "disk",
        "environment",
    ]
    summary: str
    exit_code: int | None = None
    attempt_uid: str | None = None
    attempt_number: int | None = None
    # A Python exception, "TypeName: message", when the log shows one.
    exception: str | None = None
    peak_rss_bytes: int | None = None
    memory_limit_bytes: int | None = None
    log_tail: list[str] = Field(default_factory=list)


class TaskStatus(WireModel):
    task_id: str
    job_id: str
    task_index: int
    state: TaskState
    attempt_count: int = 0
    current_attempt_uid: str | None = None
    worker_id: str | None = None
    exit_code: int | None = None
    error: str | None = None
    pending_reason: str | None = None
    failure_count: int = 0
    preemption_count: int = 0
    started_at: float | None = None
    finished_at: float | None = None
    attempts: list[AttemptStatus] = Field(default_factory=list[AttemptStatus])
    # For a task that ended badly: why, in one place (kind, numbers, exception, log tail).
    failure: FailureInfo | None = None


class JobStatus(WireModel):
    job_id: str
    name: str
    user: str
    parent_job_id: str | None = None
    state: JobState
    priority: PriorityBand
    replicas: int
    task_counts: dict[str, int] = Field(default_factory=dict)
    submitted_at: float
    started_at: float | None = None
    finished_at: float | None = None
    exit_code: int | None = None
    error: str | None = None
    pending_reason: str | None = None
    entrypoint: str = ""
    resources: ResourceSpec | None = None


DEFAULT_TASK_PAGE = 1000
MAX_TASK_PAGE = 10_000


class JobDetail(JobStatus):
    """A job and one page of its tasks (``task_offset``, at most the page size asked for)."""

    spec: JobSpec
    tasks: list[TaskStatus] = Field(default_factory=list[TaskStatus])
    task_offset: int = 0
    children: list[str] = Field(default_factory=list)

    def failure_kind(self) -> str | None:
        """The failure kind of the job's first diagnosed failed task (``timeout``, ``oom``, ...)."""
        for task in self.tasks:
            if task.failure is not None:
                return task.failure.kind
        return None

    def state_label(self) -> str:
        """The state, with the failure kind when it says more: ``FAILED (TIMEOUT)``."""
        kind = self.failure_kind()
        if kind in SHOWN_FAILURE_KINDS and self.state.value == "FAILED":
            return f"{self.state.value} ({kind.upper()})"
        return self.state.value


class JobList(WireModel):
    jobs: list[JobStatus]
    total: int
    offset: int = 0


class SubmitResponse(WireModel):
    job_id: str


MAX_JOBS_PER_SUBMIT = 10_000


class SubmitManyRequest(WireModel):
    """Several jobs in one call; each goes through the same checks as a single submit."""

    jobs: list[JobSpec] = Field(min_length=1, max_length=MAX_JOBS_PER_SUBMIT)


class SubmitManyResponse(WireModel):
    job_ids: list[str]


class StopResponse(WireModel):
    job_id: str
    state: JobState


class LogLine(WireModel):
    ts: float
    stream: Literal["stdout", "stderr", "system"]
    line: str
    task_index: int | None = None


class LogsResponse(WireModel):
    lines: list[LogLine]
    next_offset: int = 0
    complete: bool = False
    # Line number of the first line returned, and how many lines the log holds (when known).
    start_offset: int = 0
    total_lines: int | None = None


# ---------------------------------------------------------------- workers


class WorkerHealth(WireModel):
    healthy: bool = True
    error: str | None = None
    running_attempts: int = 0
    cpu_percent: float = 0.0
    memory_used_bytes: int = 0
    disk_free_bytes: int = 0
    # The state disk is (nearly) full or not writable: take no new work, keep running what runs.
    disk_pressure: bool = False


class RegisterRequest(WireModel):
    worker_id: str | None = Field(default=None, pattern=r"^[a-zA-Z0-9][a-zA-Z0-9._-]{0,62}$")
    address: str = Field(min_length=3, max_length=255)
    capacity: ResourceSpec
    attributes: dict[str, str] = Field(default_factory=dict)
    slice_id: str | None = None
    scale_group: str | None = None


class RegisterResponse(WireModel):
    worker_id: str
    accepted: bool = True
    reconcile_interval_s: float = 1.0
    # Hex HMAC key the controller signs its calls to this worker with (iris.rpc.signing).
    rpc_secret: str | None = Field(default=None, pattern=r"^[0-9a-f]{64}$")
    # Kill every attempt when not reconciled for this long: before the controller reaps the
    # worker and retries its tasks elsewhere, so a lost task never runs twice.
    fence_after_s: float | None = Field(default=None, gt=0, allow_inf_nan=False)


class WorkerInfo(WireModel):
    worker_id: str
    address: str
    status: WorkerStatus
    capacity: ResourceSpec
    used: ResourceSpec
    attributes: dict[str, str] = Field(default_factory=dict)
    registered_at: float
    last_contact_at: float | None = None
    consecutive_failures: int = 0
    running_tasks: list[str] = Field(default_factory=list)
    slice_id: str | None = None
    scale_group: str | None = None
    health: WorkerHealth | None = None
    # CORDONED or DRAINING (DRAINED once nothing runs there): no new work; why, since when.
    cordon: Literal["CORDONED", "DRAINING", "DRAINED"] | None = None
    cordon_reason: str | None = None
    cordoned_at: float | None = None
    cordon_automatic: bool = False


class CordonRequest(WireModel):
    reason: str = Field(default="", max_length=500)


class WorkerList(WireModel):
    workers: list[WorkerInfo]


class RunSpec(WireModel):
    """Everything a worker needs to start one attempt (sent only on the dispatch tick)."""

    attempt_uid: str
    attempt_number: int
    job_id: str
    task_id: str
    task_index: int
    entrypoint: Entrypoint
    resources: ResourceSpec
    env: dict[str, str] = Field(default_factory=dict)
    environment: EnvironmentSpec | None = None
    timeout_s: float | None = None
    ports: list[str] = Field(default_factory=list)
    bundle_id: str | None = None
    # Job-level facts a backend may need to place the attempt (the Kubernetes backend does).
    priority: PriorityBand = PriorityBand.INTERACTIVE
    constraints: list[Constraint] = Field(default_factory=list[Constraint])
    preferences: list[Constraint] = Field(default_factory=list[Constraint])
    replicas: int = 1
    coscheduling: CoschedulingConfig | None = None
    # Gang members dispatched together share a generation and know how many they are.
    gang_generation: int | None = None
    gang_size: int | None = None
    # host:port of the gang's coordinator (on task 0's machine, port chosen by the controller):
    # the runtime sets the JAX and torch.distributed variables from it (attempt_env.py).
    gang_coordinator: str | None = None
    user: str = ""
    # The job's image (or the cluster's default): the worker runs the attempt in a container.
    image: str | None = None
    image_pull_policy: ImagePullPolicy = "if-not-present"
    # The job's secrets, by environment variable: set in the task's environment and masked
    # (``***``) in its log. Sent to the worker running the attempt only, never shown by any API.
    secret_env: dict[str, str] = Field(default_factory=dict, repr=False)


class DesiredAttempt(WireModel):
    """One entry of the complete desired set: run (with the spec on the first call) or stop."""

    attempt_uid: str
    intent: Literal["run", "stop"]
    spec: RunSpec | None = None
    stop_reason: StopReason | None = None


class ReconcileRequest(WireModel):
    worker_id: str
    attempts: list[DesiredAttempt]
    # False once a call has gone unanswered: the controller bounds how long the worker may keep
    # running its attempts by the last call that renewed this lease.
    renew_lease: bool = True


class AttemptObservation(WireModel):
    attempt_uid: str
    state: TaskState
    exit_code: int | None = None
    error: str | None = None
    started_at: float | None = None
    finished_at: float | None = None
    # The process tree is confirmed gone (or never existed): its resources may be reused.
    runtime_released: bool = False
    # A human-readable detail for the user, e.g. why a pod is still pending.
    message: str | None = None


class ReconcileResponse(WireModel):
    worker_id: str
    observations: list[AttemptObservation]
    health: WorkerHealth


class TaskResult(WireModel):
    """What a callable task's attempt returned (``ok``) or raised, posted by its runner."""

    attempt_uid: str = Field(min_length=1, max_length=64)
    ok: bool
    # The cloudpickle of the return value, base64 (only when ok).
    payload_b64: str | None = Field(default=None, max_length=(MAX_RESULT_BYTES * 4) // 3 + 8)
    # The formatted traceback of the exception (only when not ok).
    traceback: str | None = Field(default=None, max_length=MAX_TRACEBACK_CHARS)
    task_index: int | None = None  # filled in by the controller's answer


class TaskResults(WireModel):
    """The results of a job's tasks, each the one its current attempt posted, by task index."""

    results: list[TaskResult]


class ProfileRequest(WireModel):
    """``iris job profile``: which profiler, how long, what output (see runtime/profiling.py)."""

    kind: Literal["cpu", "threads", "memory"] = "threads"
    duration_s: float = Field(default=10.0, gt=0, le=600)
    format: Literal["svg", "text"] = "text"


class ExecRequest(WireModel):
    """Run a command beside a running task (its working directory and environment, or its pod).

    With ``profile`` a worker daemon ignores ``argv`` and runs that profiler itself, on its own
    machine against the task's processes (those of a container task too, by their host pid); a
    pod (which has no daemon) runs ``argv``."""

    argv: list[str] = Field(min_length=1, max_length=1000)
    timeout_s: float = Field(default=60.0, gt=0, le=3600)
    profile: ProfileRequest | None = None


class ExecResponse(WireModel):
    exit_code: int
    stdout: str = ""
    stderr: str = ""


class EndpointRegistration(WireModel):
    """A running task announces a named service address, visible to its job tree's namespace."""

    name: str = Field(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9][A-Za-z0-9._/-]*$")
    address: str = Field(min_length=3, max_length=255)
    job_id: str
    task_id: str | None = None
    metadata: dict[str, str] = Field(default_factory=dict)


class EndpointInfo(WireModel):
    name: str
    namespace: str
    address: str
    job_id: str
    task_id: str | None = None
    metadata: dict[str, str] = Field(default_factory=dict)
    registered_at: float


class EndpointList(WireModel):
    endpoints: list[EndpointInfo]


class DryRunResult(WireModel):
    job_id: str
    would_place: bool
    summary: str
    placements: list[dict[str, str]] = Field(default_factory=list[dict[str, str]])
    pending: dict[str, dict[str, str]] = Field(default_factory=dict)
    preemptions: list[dict[str, str]] = Field(default_factory=list[dict[str, str]])


# ---------------------------------------------------------------- secrets


class SecretValue(WireModel):
    """``PUT /api/v1/secrets/NAME``: the value (never returned by any API)."""

    value: str = Field(min_length=1, max_length=MAX_SECRET_BYTES)
    # Whose secret (admins may set anyone's; a user token always sets its own).
    user: str | None = Field(default=None, max_length=64)
    # An admin's (or an open controller's) owner when ``user`` is not given: the client's login.
    default_user: str | None = Field(default=None, max_length=64)

    @field_validator("value")
    @classmethod
    def _text(cls, value: str) -> str:
        _check_text("the secret", value)
        return value


class SecretInfo(WireModel):
    name: str
    user: str
    created_at: float
    updated_at: float


class SecretList(WireModel):
    secrets: list[SecretInfo]


class ClientConfig(WireModel):
    """What a client applies at submission: environment variables copied from the submitter."""

    forward_env: list[str] = Field(default_factory=list)


# ---------------------------------------------------------------- cluster


class DashboardInfo(WireModel):
    name: str
    capabilities: list[str]


class ClusterStatus(WireModel):
    backend_id: str
    kind: str
    display_name: str
    capabilities: list[str]
    version: str
    uptime_s: float
    jobs_by_state: dict[str, int] = Field(default_factory=dict)
    tasks_by_state: dict[str, int] = Field(default_factory=dict)
    workers_by_status: dict[str, int] = Field(default_factory=dict)
    dashboard_url: str | None = None


class UserBudget(WireModel):
    """What one user's running work may hold at once (``iris user budget set``); an unset
    amount is unlimited. ``max_band``: the most important band the user may submit at
    (PRODUCTION is for admins unless a budget names it). Accepts ``cpu=4`` and ``memory="16GB"``."""

    cpu_millicores: int | None = Field(
        default=None, ge=0, le=10_000_000_000, description="Cpu at once, in millicores (or write `cpu: 8`)."
    )
    memory_bytes: int | None = Field(
        default=None, ge=0, le=1 << 62, description="Memory at once, in bytes (or write `memory: 32GB`)."
    )
    gpu: int | None = Field(default=None, ge=0, le=1_000_000, description="GPUs (device type `gpu`) at once.")
    tpu: int | None = Field(
        default=None, ge=0, le=1_000_000, description="TPU chips (device type `tpu`) at once."
    )
    max_band: PriorityBand | None = Field(
        default=None,
        description="The most important band the user may submit at (PRODUCTION: also non-admins).",
    )

    @model_validator(mode="before")
    @classmethod
    def _friendly(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        data = dict(cast("dict[str, Any]", data))  # the request's JSON object
        if data.get("cpu") is not None:
            data["cpu_millicores"] = parse_cpu_millicores(data.pop("cpu"))
        data.pop("cpu", None)
        if data.get("memory") is not None:
            data["memory_bytes"] = parse_bytes(data.pop("memory"))
        data.pop("memory", None)
        if isinstance(data.get("max_band"), str):
            data["max_band"] = data["max_band"].upper()
        return data

    def __init__(self, **data: Any) -> None:  # keeps cpu=/memory= visible to type checkers
        super().__init__(**data)


class UserBudgetInfo(WireModel):
    """A user's budget as the controller applies it: set by ``iris user budget set`` ("api") or
    a default of the cluster config's ``user_budgets`` ("config")."""

    user: str
    budget: UserBudget
    source: Literal["api", "config"]
    updated_at: float | None = None


class UserBudgetList(WireModel):
    budgets: list[UserBudgetInfo]
