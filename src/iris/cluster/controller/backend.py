"""The controller's backend contract.

The two backend kinds have deliberately different mechanisms: a worker backend runs the
Iris scheduler and worker RPCs, while a Kubernetes backend hands placement to Kueue and
reconciles Pods directly. A controller gets exactly one ``BackendDescriptor`` at
construction and keeps it for life; switching kind means restarting the controller.

Both kinds implement one ``TaskBackend``: ``converge`` takes the complete desired attempts
(one ``DesiredGroup`` per worker daemon, or one for the whole cluster) and answers what it
observed; the attempt RPCs (logs, exec, process status) take an ``AttemptRef`` whose
``TaskTarget`` is a worker address (WORKER) or the attempt uid a pod name is rebuilt from
(KUBERNETES). The backend kind still selects the controller's seams (the Iris scheduler and
worker health for WORKER; Pod reconciliation for KUBERNETES) and the dashboard's tabs.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from types import MappingProxyType
from typing import Any, Protocol

from iris.cluster.types import AttemptRef, DesiredGroup, GroupReport, TaskTarget
from iris.rpc.models import ExecRequest, ExecResponse, LogsResponse

__all__ = [
    "AttemptRef",
    "BackendDescriptor",
    "BackendKind",
    "DashboardDescriptor",
    "DesiredGroup",
    "GroupReport",
    "TaskBackend",
    "TaskTarget",
    "dashboard_backend_descriptor",
]


class BackendKind(StrEnum):
    """The execution mechanism owned by a controller's backend."""

    WORKER = "worker-daemon"
    KUBERNETES = "kubernetes"


def _freeze_attributes(attrs: Mapping[str, Iterable[str]] | None) -> Mapping[str, frozenset[str]]:
    frozen = {
        str(k): frozenset(str(v) for v in ([vals] if isinstance(vals, str) else vals))
        for k, vals in (attrs or {}).items()
    }
    return MappingProxyType(frozen)


@dataclass(frozen=True)
class BackendDescriptor:
    """Immutable description of a controller's backend."""

    backend_id: str
    kind: BackendKind
    advertised_attributes: Mapping[str, frozenset[str]] = field(default_factory=dict[str, frozenset[str]])
    scale_groups: frozenset[str] = frozenset()
    display_name: str = ""

    def __post_init__(self) -> None:
        object.__setattr__(self, "kind", BackendKind(self.kind))
        object.__setattr__(self, "advertised_attributes", _freeze_attributes(self.advertised_attributes))
        object.__setattr__(self, "scale_groups", frozenset(self.scale_groups))
        if not self.display_name:
            object.__setattr__(self, "display_name", self.backend_id)

    def __hash__(self) -> int:
        return hash((self.backend_id, self.kind, self.scale_groups, self.display_name))


class TaskBackend(Protocol):
    """What the controller asks of its backend, whatever its kind."""

    def converge(self, groups: Sequence[DesiredGroup]) -> list[GroupReport]:
        """Make each group's attempts run or stop as desired; one report per group."""
        ...

    def attempt_logs(self, ref: AttemptRef, *, offset: int, limit: int) -> LogsResponse: ...

    def attempt_exec(self, ref: AttemptRef, request: ExecRequest) -> ExecResponse: ...

    def attempt_status(self, ref: AttemptRef) -> dict[str, Any]:
        """The attempt's processes (``kind: process``) or its pod (``kind: pod``)."""
        ...

    def overview(self) -> dict[str, Any]:
        """The substrate as the backend sees it (raises NotImplementedForBackend where none)."""
        ...

    def watch(self, on_change: Callable[[], None]) -> None:
        """Call ``on_change`` when the substrate changes (a latency hint; may do nothing)."""
        ...

    def set_controller_url(self, url: str) -> None: ...

    def close(self) -> None: ...


@dataclass(frozen=True)
class DashboardDescriptor:
    """What the dashboard shows for a controller: its name and the tabs its backend supports."""

    name: str
    capabilities: list[str]


class HasBackendDescriptor(Protocol):
    @property
    def backend_descriptor(self) -> BackendDescriptor: ...

    @property
    def autoscaler_configured(self) -> bool: ...


def dashboard_backend_descriptor(controller: HasBackendDescriptor) -> DashboardDescriptor:
    desc = controller.backend_descriptor
    if desc.kind is BackendKind.WORKER:
        capabilities = ["workers"]
        if controller.autoscaler_configured:
            capabilities.append("autoscaler")
        return DashboardDescriptor(name=desc.display_name, capabilities=capabilities)
    return DashboardDescriptor(name=desc.display_name, capabilities=["cluster"])
