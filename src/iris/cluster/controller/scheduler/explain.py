"""What-if for ``--dry-run`` and the dashboard: where would these tasks go right now, or why not.

``explain`` runs the real kernel on a copy of the snapshot with the given tasks added (behind
``queued``, the work already waiting, if the caller passes it) and reports only on those tasks.
Nothing is changed: the kernel is pure.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from .formatting import plural, quote_list
from .kernel import schedule
from .model import PendingReason, Preemption, RunningTask, TaskRequest, WorkerView


@dataclass(frozen=True, slots=True)
class Explanation:
    placements: tuple[tuple[str, str], ...]  # (task_id, worker_id) for tasks that would place now
    pending: Mapping[str, PendingReason]  # the others, with the reason they would wait
    preemptions: tuple[Preemption, ...]  # what placing them would preempt first

    @property
    def would_place(self) -> bool:
        """Every task would be assigned in this pass."""
        return not self.pending

    def summary(self) -> str:
        """One line: the workers the tasks would land on, or the most common reason they wait."""
        placed = len(self.placements)
        if not self.pending:
            workers = sorted({worker for _, worker in self.placements})
            return f"would place {plural(placed, 'task')} now on {quote_list(workers)}"
        counts = Counter((r.code, r.message) for r in self.pending.values())
        (code, message), count = counts.most_common(1)[0]
        total = placed + len(self.pending)
        prefix = "" if total == 1 else f"{count} of {total} tasks would wait: "
        suffix = f" ({placed} would place now)" if placed else ""
        return f"{prefix}{message} [{code}]{suffix}"


def explain(
    tasks: TaskRequest | Sequence[TaskRequest],
    workers: Sequence[WorkerView],
    running: Sequence[RunningTask] = (),
    *,
    queued: Sequence[TaskRequest] = (),
    allow_preemption: bool = True,
) -> Explanation:
    """Where ``tasks`` would be placed now, what they would preempt, or why they would wait.

    With ``queued`` (the pending tasks already waiting) the answer accounts for the work ahead
    of them; without it, it answers "if nothing else were waiting".
    """
    asked = [tasks] if isinstance(tasks, TaskRequest) else list(tasks)
    ids = {task.task_id for task in asked}
    result = schedule([*queued, *asked], workers, running, allow_preemption=allow_preemption)
    return Explanation(
        placements=tuple((t, w) for t, w in result.assignments if t in ids),
        pending={t: reason for t, reason in result.pending.items() if t in ids},
        preemptions=tuple(p for p in result.preemptions if p.preemptor_task_id in ids),
    )
