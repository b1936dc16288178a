"""The cluster config file: one YAML document describing a controller, its backend and its capacity.

Every model rejects unknown keys. ``load_cluster_config`` reports each problem with the YAML line
it comes from, e.g. ``cluster.yaml line 12: scale_groups.gpu.max_slices: Input should be a valid
integer``. The field docstrings double as the configuration reference.
"""

from __future__ import annotations

import difflib
import re
import types
import typing
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from iris.rpc.errors import InvalidArgument
from iris.rpc.models import ResourceSpec, UserBudget

__all__ = [
    "AuthConfig",
    "AuthToken",
    "AutoscalerDefaults",
    "BackendConfig",
    "BackoffConfig",
    "ClusterConfig",
    "ControllerConfig",
    "DefaultsConfig",
    "LocalGroupOptions",
    "LogsConfig",
    "ManualPlatformConfig",
    "PlatformConfig",
    "ScaleGroupConfig",
    "WorkerDefaults",
    "load_cluster_config",
    "parse_cluster_config",
    "SCALE_GROUP_ATTRIBUTE",
    "SLICE_ATTRIBUTE",
    "DEVICE_TYPE_ATTRIBUTE",
    "DEVICE_VARIANT_ATTRIBUTE",
]

# Attributes every autoscaled worker carries besides its group's own ``attributes``.
SCALE_GROUP_ATTRIBUTE = "scale-group"
SLICE_ATTRIBUTE = "slice"
DEVICE_TYPE_ATTRIBUTE = "device-type"
DEVICE_VARIANT_ATTRIBUTE = "device-variant"

_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_GROUP_NAME = re.compile(r"^[a-z0-9][a-z0-9-]{0,39}$")


class ConfigModel(BaseModel):
    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)


# ---------------------------------------------------------------- controller and backend


class ControllerConfig(ConfigModel):
    """Where the controller listens and keeps its state."""

    host: str = "127.0.0.1"
    """Address the controller's HTTP API binds to."""

    port: int = Field(default=10000, ge=0, le=65535)
    """TCP port of the HTTP API (0 picks a free port)."""

    state_dir: Path = Field(default=Path("~/.iris/state"), validate_default=True)
    """Directory for the SQLite database, bundles and local worker state (``~`` is expanded)."""

    @field_validator("state_dir")
    @classmethod
    def _expand(cls, value: Path) -> Path:
        return value.expanduser()


class LogsConfig(ConfigModel):
    """Retention of task logs and usage in the controller's log store (``<state_dir>/logs``).

    Workers (and, on Kubernetes, the controller itself) copy every attempt's log there as it is
    written, so logs outlive the machine or pod that produced them.
    """

    max_age_hours: float = Field(default=168.0, gt=0)
    """An attempt's log not written to for this long is deleted (default: one week)."""

    max_total_size: int = Field(default=10 * 1000**3, ge=1_000_000)
    """Above this many bytes in total (``10GB``, ``500MB`` ... accepted), the oldest logs go first."""

    max_job_size: int = Field(default=1000**3, ge=10_000)
    """One job's output kept at most (all its attempts together): past it, each attempt's log ends
    with one marker line and the rest is dropped, so one job cannot fill the controller's disk."""

    @field_validator("max_total_size", "max_job_size", mode="before")
    @classmethod
    def _size(cls, value: Any) -> Any:
        if isinstance(value, str):
            from iris.rpc.units import parse_bytes

            try:
                return parse_bytes(value)
            except ValueError as exc:
                raise ValueError(str(exc)) from None
        return value


class BackendConfig(ConfigModel):
    """The controller's one backend, fixed for the life of the process."""

    kind: Literal["worker-daemon", "kubernetes"] = "worker-daemon"
    """``worker-daemon``: Iris schedules onto worker daemons. ``kubernetes``: one Pod per attempt, placed by Kueue."""

    backend_id: str = Field(default="iris", min_length=1, max_length=64)
    """Stable identifier of this backend."""

    display_name: str = ""
    """Name shown on the dashboard (defaults to ``backend_id``)."""

    kubernetes: dict[str, Any] | None = None
    """Settings of the Kubernetes backend (namespace, queue names, ...); only with ``kind: kubernetes``."""

    @model_validator(mode="after")
    def _check(self) -> BackendConfig:
        if self.kubernetes is not None and self.kind != "kubernetes":
            raise ValueError("the 'kubernetes' settings only apply with kind: kubernetes")
        return self


# ---------------------------------------------------------------- platforms and scale groups


class ManualPlatformConfig(ConfigModel):
    """Machines an operator manages by hand."""

    hosts: list[str] = Field(min_length=1)
    """Hosts (``host`` or ``host:port``) where an operator starts worker daemons."""


class PlatformConfig(ConfigModel):
    """Where worker machines come from."""

    kind: Literal["local", "manual", "fake"] = "local"
    """``local``: worker daemons as processes on this machine. ``manual``: a fixed host list.
    ``fake``: in-memory slices for tests."""

    manual: ManualPlatformConfig | None = None
    """Host list of the manual platform (required with ``kind: manual``)."""

    @model_validator(mode="after")
    def _check(self) -> PlatformConfig:
        if self.kind == "manual" and self.manual is None:
            raise ValueError("kind: manual needs a 'manual: {hosts: [...]}' section")
        if self.kind != "manual" and self.manual is not None:
            raise ValueError(f"the 'manual' section only applies with kind: manual (kind is {self.kind})")
        return self


class LocalGroupOptions(ConfigModel):
    """Options of a scale group on the local platform."""

    fail_boot: bool = False
    """Start this group's workers with a bad flag so every boot fails (to see backoff and fallback)."""


class ScaleGroupConfig(ConfigModel):
    """A pool of identical slices; a slice is ``num_vms`` machines created and removed as one unit."""

    name: str = ""
    """Group name; taken from its key under ``scale_groups``."""

    resources: ResourceSpec
    """Capacity of ONE machine of a slice: ``cpu``, ``memory``, ``disk``, ``device: {type, variant, count}``."""

    attributes: dict[str, str] = Field(default_factory=dict)
    """Attributes of every worker of the group, matched by job constraints (e.g. ``zone: a``)."""

    min_slices: int = Field(default=0, ge=0, le=100_000)
    """Slices kept even without demand."""

    max_slices: int = Field(default=1, ge=0, le=100_000)
    """Hard cap on slices of this group."""

    buffer_slices: int = Field(default=0, ge=0, le=100_000)
    """Idle slices kept warm beyond demand (never past ``max_slices``)."""

    priority: int = Field(default=100, ge=0)
    """Routing order: demand goes to the fitting group with the LOWEST priority number first."""

    num_vms: int = Field(default=1, ge=1, le=1024)
    """Machines (worker daemons) per slice; a gang of N tasks needs a group with ``num_vms >= N``."""

    boot_timeout_s: float | None = Field(default=None, gt=0)
    """Override of ``defaults.autoscaler.boot_timeout_s`` for this group."""

    scale_down_delay_s: float | None = Field(default=None, ge=0)
    """Override of ``defaults.autoscaler.scale_down_delay_s`` for this group."""

    max_creates_per_minute: int | None = Field(default=None, ge=1)
    """Override of ``defaults.autoscaler.max_creates_per_minute`` for this group."""

    local: LocalGroupOptions = Field(default_factory=LocalGroupOptions)
    """Options used by the local platform only."""

    @field_validator("attributes")
    @classmethod
    def _attribute_keys(cls, attrs: dict[str, str]) -> dict[str, str]:
        reserved = {SCALE_GROUP_ATTRIBUTE, SLICE_ATTRIBUTE, DEVICE_TYPE_ATTRIBUTE, DEVICE_VARIANT_ATTRIBUTE}
        for key in attrs:
            if key in reserved:
                raise ValueError(f"attribute {key!r} is set by Iris itself; choose another key")
            if not key or "=" in key:
                raise ValueError(f"bad attribute key {key!r}")
        return attrs

    @model_validator(mode="after")
    def _check(self) -> ScaleGroupConfig:
        if self.name and not _GROUP_NAME.match(self.name):
            raise ValueError(
                f"bad scale group name {self.name!r}: use lowercase letters, digits and '-', at most 40 characters"
            )
        if self.min_slices > self.max_slices:
            raise ValueError(f"min_slices ({self.min_slices}) is larger than max_slices ({self.max_slices})")
        return self

    def worker_attributes(self, slice_id: str | None = None) -> dict[str, str]:
        """The attributes a worker of this group registers with (the slice's own id only when known).

        The autoscaler routes demand with exactly these attributes, so a job routed to a group
        is guaranteed to be placeable on that group's workers.
        """
        attrs = dict(self.attributes)
        attrs[SCALE_GROUP_ATTRIBUTE] = self.name
        device = self.resources.device
        if device is not None and device.count > 0 and device.type.lower() != "cpu":
            attrs[DEVICE_TYPE_ATTRIBUTE] = device.type.lower()
            if device.variant:
                attrs[DEVICE_VARIANT_ATTRIBUTE] = device.variant.lower()
        if slice_id is not None:
            attrs[SLICE_ATTRIBUTE] = slice_id
        return attrs


# ---------------------------------------------------------------- defaults


class BackoffConfig(ConfigModel):
    """When a scale group stops creating slices after boot failures."""

    failure_threshold: int = Field(default=3, ge=1)
    """Boot failures within ``window_s`` that put a group in backoff."""

    window_s: float = Field(default=600.0, gt=0)
    """Sliding window over which boot failures are counted."""

    initial_s: float = Field(default=60.0, gt=0)
    """Length of the first backoff."""

    multiplier: float = Field(default=2.0, ge=1.0)
    """Each further backoff (without a slice becoming ready in between) lasts this much longer."""

    max_s: float = Field(default=900.0, gt=0)
    """Cap on one backoff's length."""


class AutoscalerDefaults(ConfigModel):
    """Autoscaler timings (scale groups may override some of them)."""

    evaluation_interval_s: float = Field(default=10.0, gt=0)
    """How often the controller evaluates demand and acts on it."""

    scale_down_delay_s: float = Field(default=300.0, ge=0)
    """A slice idle for longer than this may be removed (down to the group's target)."""

    boot_timeout_s: float = Field(default=600.0, gt=0)
    """A slice not READY this long after creation is removed and counted as a boot failure."""

    max_creates_per_evaluation: int = Field(default=8, ge=1)
    """Per group: slices created at most per evaluation."""

    max_creates_per_minute: int = Field(default=16, ge=1)
    """Per group: slices created at most per rolling minute."""

    backoff: BackoffConfig = Field(default_factory=BackoffConfig)
    """Backoff after repeated boot failures."""


class WorkerDefaults(ConfigModel):
    """Timings shared by the controller's health tracking and the worker daemons."""

    reconcile_interval_s: float = Field(default=1.0, gt=0)
    """Safety-net period of the controller's Reconcile RPC to each worker."""

    unreachable_grace_s: float = Field(default=50.0, gt=0)
    """A worker unreachable for this long (and ``min_unreachable_failures`` times) is declared dead."""

    min_unreachable_failures: int = Field(default=3, ge=1)
    """Consecutive failed Reconcile calls needed (with the grace) before a worker is declared dead."""

    reregister_after_s: float = Field(default=30.0, gt=0)
    """A worker that has not heard from the controller for this long registers again."""

    drain_grace_s: float = Field(default=3600.0, ge=0)
    """``iris worker drain``: tasks still running this long after the drain began are moved elsewhere."""

    quarantine_failures: int = Field(default=3, ge=0)
    """A worker where attempts of this many different jobs failed with infrastructure errors (start or
    build failures, full disk, device errors, the worker's own loss) within ``quarantine_window_s`` is
    cordoned automatically (0: never)."""

    quarantine_window_s: float = Field(default=600.0, gt=0)
    """The sliding window of ``quarantine_failures``."""


class DefaultsConfig(ConfigModel):
    autoscaler: AutoscalerDefaults = Field(default_factory=AutoscalerDefaults)
    """Autoscaler timings, backoff and rate limits."""

    worker: WorkerDefaults = Field(default_factory=WorkerDefaults)
    """Worker liveness and registration timings."""

    task_image: str | None = Field(
        default=None, min_length=1, max_length=512, pattern=r"^[A-Za-z0-9][A-Za-z0-9._/:@+-]*$"
    )
    """Container image of every job that names none (worker daemons run it with the docker CLI; on
    Kubernetes it is the pods' image). Unset: worker tasks run as plain processes."""
    task_env: dict[str, str] = Field(default_factory=dict)
    """Environment variables every task gets, under its job's own (a job's ``env`` wins key by key)."""

    @field_validator("task_env")
    @classmethod
    def _task_env(cls, env: dict[str, str]) -> dict[str, str]:
        for key in env:
            if not _ENV_NAME.match(key):
                raise ValueError(f"{key!r} is not an environment variable name")
        return env


# ---------------------------------------------------------------- auth


class AuthToken(ConfigModel):
    """One bearer token accepted by the controller."""

    token: str = Field(min_length=8)
    """The secret, sent as ``Authorization: Bearer <token>``."""

    role: Literal["admin", "user", "worker"]
    """``admin`` sees and controls everything, ``user`` only their own jobs, ``worker`` only worker RPCs."""

    user: str | None = Field(default=None, pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
    """User name the token acts as (required for ``user`` tokens)."""

    @model_validator(mode="after")
    def _check(self) -> AuthToken:
        if self.role == "user" and not self.user:
            raise ValueError("a token with role 'user' needs a 'user' name")
        return self


class AuthConfig(ConfigModel):
    """Bearer-token authentication; with no tokens the API is open (fine on loopback only)."""

    tokens: list[AuthToken] = Field(default_factory=list)
    """Accepted tokens and their roles."""

    @model_validator(mode="after")
    def _unique(self) -> AuthConfig:
        seen: set[str] = set()
        for entry in self.tokens:
            if entry.token in seen:
                raise ValueError("the same token is listed twice")
            seen.add(entry.token)
        return self


# ---------------------------------------------------------------- the whole file


class ClusterConfig(ConfigModel):
    """A whole cluster: controller, backend, platform, scale groups, defaults and auth."""

    name: str = "iris"
    """Cluster name shown by the CLI and dashboard."""

    controller: ControllerConfig = Field(default_factory=ControllerConfig)
    """Controller address and state directory."""

    backend: BackendConfig = Field(default_factory=BackendConfig)
    """The execution backend."""

    platform: PlatformConfig = Field(default_factory=PlatformConfig)
    """Where worker machines come from (worker-daemon backend only)."""

    scale_groups: dict[str, ScaleGroupConfig] = Field(default_factory=dict)
    """Autoscaled pools of slices, by name (worker-daemon backend only)."""

    defaults: DefaultsConfig = Field(default_factory=DefaultsConfig)
    """Timings of the autoscaler and the workers."""

    auth: AuthConfig = Field(default_factory=AuthConfig)
    """API authentication."""

    logs: LogsConfig = Field(default_factory=LogsConfig)
    """How long and how much of the task logs the controller keeps."""

    user_budgets: dict[str, UserBudget] = Field(default_factory=dict)
    """Default per-user budgets, by user (``"*"``: every user without their own), e.g.
    ``alice: {cpu: 8, memory: 32GB, gpu: 2, max_band: INTERACTIVE}``. A budget set with
    ``iris user budget set`` wins over the user's entry here. See docs/budgets.md."""

    forward_env: list[str] = Field(default_factory=list)
    """Variables (e.g. ``HF_TOKEN``, ``WANDB_API_KEY``) the CLI and SDK copy from the submitter's
    environment into each job's ``env`` at submission, when set there and not given by the job."""

    @field_validator("forward_env")
    @classmethod
    def _forward_env(cls, names: list[str]) -> list[str]:
        for name in names:
            if not _ENV_NAME.match(name):
                raise ValueError(f"{name!r} is not an environment variable name")
        return names

    @model_validator(mode="before")
    @classmethod
    def _group_names(cls, data: Any) -> Any:
        if isinstance(data, dict) and isinstance(data.get("scale_groups"), dict):
            groups = {}
            for key, group in data["scale_groups"].items():
                if isinstance(group, dict) and "name" not in group:
                    group = {**group, "name": key}
                groups[key] = group
            data = {**data, "scale_groups": groups}
        return data

    @field_validator("scale_groups")
    @classmethod
    def _check_groups(
        cls, groups: dict[str, ScaleGroupConfig], info: ValidationInfo
    ) -> dict[str, ScaleGroupConfig]:
        for key, group in groups.items():
            if group.name != key:
                raise ValueError(
                    f"scale group {key!r} has name {group.name!r}; leave 'name' out or make them equal"
                )
        backend, platform = info.data.get("backend"), info.data.get("platform")
        if groups and backend is not None and backend.kind == "kubernetes":
            raise ValueError(
                "scale groups apply to the worker-daemon backend only; with kind: kubernetes the "
                "cluster's own autoscaler (Karpenter, Cluster Autoscaler) provides capacity"
            )
        if groups and platform is not None and platform.kind == "manual":
            raise ValueError(
                "the manual platform cannot create machines: remove scale_groups or use kind: local"
            )
        return groups

    @property
    def autoscaler_enabled(self) -> bool:
        return self.backend.kind == "worker-daemon" and bool(self.scale_groups)

    def group_list(self) -> list[ScaleGroupConfig]:
        """Scale groups in routing order (priority, then name)."""
        return sorted(self.scale_groups.values(), key=lambda g: (g.priority, g.name))


# ---------------------------------------------------------------- loading with line numbers


def load_cluster_config(path: str | Path) -> ClusterConfig:
    """Read and validate a cluster config file; problems raise ``InvalidArgument`` naming key and line."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise InvalidArgument(f"cannot read cluster config {path}: {exc.strerror or exc}") from None
    return parse_cluster_config(text, source=path.name)


def parse_cluster_config(text: str, source: str = "cluster.yaml") -> ClusterConfig:
    """Validate cluster config YAML given as text; ``source`` names it in error messages."""
    loader = yaml.SafeLoader(text)
    try:
        root = loader.get_single_node()
        data = loader.construct_document(root) if root is not None else None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f"{source} line {mark.line + 1}" if mark is not None else source
        raise InvalidArgument(f"{where}: not valid YAML: {exc.problem or exc}") from None
    except yaml.YAMLError as exc:
        raise InvalidArgument(f"{source}: not valid YAML: {exc}") from None
    finally:
        loader.dispose()
    duplicate = _duplicate_key(root)
    if duplicate is not None:
        raise InvalidArgument(f"{source} line {duplicate[1]}: key {duplicate[0]!r} appears twice")
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise InvalidArgument(f"{source} line 1: the cluster config must be a mapping of sections")
    try:
        return ClusterConfig.model_validate(data)
    except ValidationError as exc:
        raise InvalidArgument(_describe_errors(exc, root, source)) from None


def _describe_errors(exc: ValidationError, root: yaml.Node | None, source: str) -> str:
    lines = []
    for error in exc.errors(include_url=False):
        loc = tuple(error["loc"])
        line = _line_of(root, loc)
        where = f"{source} line {line}" if line is not None else source
        path = ".".join(str(part) for part in loc) or "(top level)"
        lines.append(f"{where}: {path}: {_message(error, loc)}")
    return "\n".join(dict.fromkeys(lines))


def _message(error: Any, loc: tuple[Any, ...]) -> str:
    message = str(error["msg"])
    if error["type"] == "extra_forbidden" and loc:
        allowed = _allowed_keys(ClusterConfig, loc[:-1])
        message = "unknown key"
        if allowed:
            close = difflib.get_close_matches(str(loc[-1]), allowed, n=1)
            if close:
                message += f" (did you mean {close[0]!r}?)"
            message += f"; allowed keys: {', '.join(allowed)}"
    elif message.startswith("Value error, "):
        message = message[len("Value error, ") :]
    return message


def _line_of(root: yaml.Node | None, loc: tuple[Any, ...]) -> int | None:
    """1-based line of the deepest YAML key (or list item) along ``loc``."""
    node = root
    line = node.start_mark.line + 1 if node is not None else None
    for part in loc:
        if isinstance(node, yaml.MappingNode):
            found = next(
                ((k, v) for k, v in node.value if isinstance(k, yaml.ScalarNode) and k.value == str(part)),
                None,
            )
            if found is None:
                return line
            line = found[0].start_mark.line + 1
            node = found[1]
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int) and 0 <= part < len(node.value):
            node = node.value[part]
            line = node.start_mark.line + 1
        else:
            return line
    return line


def _duplicate_key(node: yaml.Node | None) -> tuple[str, int] | None:
    """The first key repeated within one mapping (YAML would silently keep the last one)."""
    if isinstance(node, yaml.MappingNode):
        seen: set[str] = set()
        for key_node, value_node in node.value:
            if isinstance(key_node, yaml.ScalarNode):
                if key_node.value in seen:
                    return key_node.value, key_node.start_mark.line + 1
                seen.add(key_node.value)
            found = _duplicate_key(value_node)
            if found:
                return found
    elif isinstance(node, yaml.SequenceNode):
        for item in node.value:
            found = _duplicate_key(item)
            if found:
                return found
    return None


def _allowed_keys(model: type[BaseModel], loc: tuple[Any, ...]) -> list[str]:
    """Field names of the model found by walking ``loc`` from ``model`` (empty when unsure)."""
    current: Any = model
    for part in loc:
        current = _step(current, part)
        if current is None:
            return []
    current = _unwrap(current)
    if current is ResourceSpec:
        return ["cpu", "memory", "disk", "device"]
    if isinstance(current, type) and issubclass(current, BaseModel):
        return list(current.model_fields)
    return []


def _step(annotation: Any, part: Any) -> Any:
    annotation = _unwrap(annotation)
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        field = annotation.model_fields.get(str(part))
        return field.annotation if field is not None else None
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is dict and len(args) == 2:
        return args[1]
    if origin is list and args:
        return args[0]
    return None


def _unwrap(annotation: Any) -> Any:
    """``X | None`` -> ``X``."""
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        options = [arg for arg in typing.get_args(annotation) if arg is not type(None)]
        if len(options) == 1:
            return options[0]
    return annotation
