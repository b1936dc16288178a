"""The autoscaler for the worker-daemon backend: a pure planner and a thin shell around a platform.

``plan(snapshot, now)`` decides; ``Autoscaler`` observes the platform, calls it, applies the plan
and persists its state in ``autoscaler_*`` tables of the controller database.
"""

from iris.cluster.controller.autoscaler.adapters import demand_from_requests, slice_usage_from_workers
from iris.cluster.controller.autoscaler.autoscaler import Autoscaler, GroupStatus, SliceStatus
from iris.cluster.controller.autoscaler.model import (
    ActionKind,
    AutoscalerPlan,
    AutoscalerSnapshot,
    BackoffState,
    CreateSlice,
    DemandEntry,
    GroupDecision,
    GroupSnapshot,
    ScaleAction,
    SliceView,
    TerminateSlice,
    UnmetDemand,
)
from iris.cluster.controller.autoscaler.planner import plan
from iris.cluster.controller.autoscaler.routing import group_misfit, unfittable_reason
from iris.cluster.controller.autoscaler.store import AutoscalerStore

__all__ = [
    "ActionKind",
    "Autoscaler",
    "AutoscalerPlan",
    "AutoscalerSnapshot",
    "AutoscalerStore",
    "BackoffState",
    "CreateSlice",
    "DemandEntry",
    "GroupDecision",
    "GroupSnapshot",
    "GroupStatus",
    "ScaleAction",
    "SliceStatus",
    "SliceView",
    "TerminateSlice",
    "UnmetDemand",
    "demand_from_requests",
    "group_misfit",
    "plan",
    "slice_usage_from_workers",
    "unfittable_reason",
]
