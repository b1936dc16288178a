"""The WORKER backend's scheduler: a pure decision kernel.

``schedule(pending, workers, running)`` takes a snapshot (frozen dataclasses) and returns
assignments, preemptions and a reason for every task it leaves pending. ``explain`` answers
"where would this go now" for ``--dry-run``. Nothing here does I/O or keeps state between calls.

What the controller passes and does with the result:

- ``WorkerView.used`` already includes every unreleased attempt on the worker (the kernel does
  not add ``running`` on top); ``schedulable=False`` for degraded or draining workers.
- ``running`` lists unfinished attempts bound to workers. Mark those it is already stopping
  (preempted or killed, process not yet confirmed gone) with ``stopping=True``: they are never
  picked as victims again, and the work they make room for waits for them (code "preempting")
  instead of preempting someone else.
- A ``Preemption`` asks the controller to stop the victim; its preemptor is *not* assigned in
  this pass and gets placed by a later pass once the victim is gone.
- Reason codes (``ReasonCode``): no_workers, constraints, exceeds_capacity (larger than any
  matching worker even when idle: more workers will not help unless they are bigger),
  resources (busy now), gang, preempting, queued (``max_assignments`` reached).
  ``PendingReason.position`` is the task's place among waiting tasks of its band (1 = next).

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
