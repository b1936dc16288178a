"""What committed ``Applied`` results mean for the rest of the controller process.

``CommitNews`` gathers, commit by commit inside one transaction, what the process must hear once
the transaction has committed: which pending-queue entries changed, which workers' desired sets
moved, which jobs ended, and the log lines of tasks and jobs that moved. It keeps only those
facts, not the ``Applied`` results (a batch of 1,000 submits would otherwise keep 1,000 of them,
with every write they hold, alive until COMMIT)."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from iris.cluster.controller import round_kernel as kernel
from iris.cluster.controller.effects import Applied, Assign, InsertJob, MoveTask, SetJob
from iris.rpc.enums import TERMINAL_JOB_STATES, TaskState

log = logging.getLogger("iris.controller")


@dataclass
class CommitNews:
    # Jobs inserted, in order.
    submitted: list[str] = field(default_factory=list[str])
    # task id -> True: back to PENDING (or its placement was overtaken); False: left PENDING.
    # The last commit of the transaction has the last word.
    pending: dict[str, bool] = field(default_factory=dict[str, bool])
    workers: set[str] = field(default_factory=set[str])
    finished_jobs: list[str] = field(default_factory=list[str])
    fleet_changed: bool = False
    dropped: int = 0
    refused: int = 0
    # Task moves and job ends worth a log line (``log_moves``).
    moves: list[MoveTask | SetJob] = field(default_factory=list[MoveTask | SetJob])

    def add(self, applied: Applied) -> None:
        pending = self.pending
        for change in applied.changes:
            for w in change.writes:
                match w:
                    case InsertJob():
                        self.submitted.append(w.job_id)
                    case Assign():
                        pending[w.task_id] = False
                    case MoveTask(before=before, after=after):
                        if (before.state is TaskState.PENDING) != (after.state is TaskState.PENDING):
                            pending[before.task_id] = after.state is TaskState.PENDING
                        if after.state is not before.state and not kernel.is_quiet(after.state):
                            self.moves.append(w)
                    case SetJob() if w.state in TERMINAL_JOB_STATES:
                        self.moves.append(w)
                    case _:
                        pass
        for change in applied.dropped:
            for w in change.writes:
                if isinstance(w, Assign):
                    pending[w.task_id] = True
        self.workers |= applied.workers
        self.finished_jobs += applied.finished_jobs
        self.fleet_changed |= applied.fleet_changed
        self.dropped += len(applied.dropped)
        self.refused += len(applied.refused)

    def queue_news(self) -> tuple[list[str], list[str], list[str]]:
        """(jobs submitted, tasks pending again, tasks that left PENDING): new work (submissions,
        tasks back to PENDING, placements a newer state overtook) and work placed or ended."""
        again = [task_id for task_id, is_pending in self.pending.items() if is_pending]
        left = [task_id for task_id, is_pending in self.pending.items() if not is_pending]
        return self.submitted, again, left


def log_moves(moves: list[MoveTask | SetJob]) -> None:
    """One line per task that changed to a state worth telling, one per job that ended."""
    for w in moves:
        if isinstance(w, MoveTask):
            uid = w.before.current_attempt_uid
            log.info(
                "task %s %s after attempt %s: %s",
                w.before.task_id,
                w.after.state.value,
                uid,
                w.after.error or w.after.state.value.lower(),
                extra={
                    "job_id": kernel.job_of(w.before.task_id),
                    "task_id": w.before.task_id,
                    "attempt_uid": uid,
                },
            )
        else:
            log.info(
                "job %s %s%s",
                w.job_id,
                w.state.value,
                f": {w.error}" if w.error else "",
                extra={"job_id": w.job_id},
            )
