"""The WORKER backend's scheduler: a pure decision kernel.

``schedule(pending, workers, running)`` takes a snapshot (frozen dataclasses) and returns
assignments, preemptions and a reason for every task it leaves pending. ``explain`` answers
"where would this go now" for ``--dry-run``. Nothing here does I/O or keeps state between calls.

Layout: ``model`` (the data), ``ordering`` (who goes first), ``fleet`` (workers as arrays,
shapes, placement), ``constraints``, ``gangs``, ``preemption``, ``reasons`` (the wording),
``kernel`` (one pass), ``explain``.
"""

from .constraints import satisfies
from .explain import Explanation, explain
from .kernel import schedule
from .model import (
    PendingReason,
    Preemption,
    ReasonCode,
    Resources,
    RunningTask,
    SchedulingResult,
    TaskRequest,
    WorkerView,
)

__all__ = [
    "Explanation",
    "PendingReason",
    "Preemption",
    "ReasonCode",
    "Resources",
    "RunningTask",
    "SchedulingResult",
    "TaskRequest",
    "WorkerView",
    "explain",
    "satisfies",
    "schedule",
]
