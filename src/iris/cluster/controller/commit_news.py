"""What a committed ``Applied`` means for the rest of the controller process, as functions the
controller's post-commit callback calls: which pending-queue entries changed (``queue_news``) and
the log lines of tasks and jobs that moved (``log_commit``)."""

from __future__ import annotations

import logging

from iris.cluster.controller import round_kernel as kernel
from iris.cluster.controller.effects import Applied, Assign, InsertJob, MoveTask, SetJob
from iris.rpc.enums import TERMINAL_JOB_STATES, TaskState

log = logging.getLogger("iris.controller")


def queue_news(applied: Applied) -> tuple[list[str], list[str], list[str]]:
    """(jobs submitted, tasks pending again, tasks that left PENDING): new work (submissions, tasks
    back to PENDING, placements a newer state overtook) and work placed or ended."""
    submitted: list[str] = []
    again: list[str] = []
    left: list[str] = []
    for change in applied.changes:
        for w in change.writes:
            match w:
                case InsertJob():
                    submitted.append(w.job_id)
                case Assign():
                    left.append(w.task_id)
                case MoveTask(before=before, after=after) if (before.state is TaskState.PENDING) != (
                    after.state is TaskState.PENDING
                ):
                    (again if after.state is TaskState.PENDING else left).append(before.task_id)
                case _:
                    pass
    again += [w.task_id for change in applied.dropped for w in change.writes if isinstance(w, Assign)]
    return submitted, again, left


def log_commit(applied: Applied) -> None:
    """One line per task that changed to a state worth telling, one per job that ended."""
    for change in applied.changes:
        for w in change.writes:
            if (
                isinstance(w, MoveTask)
                and w.after.state is not w.before.state
                and not kernel.is_quiet(w.after.state)
            ):
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
            elif isinstance(w, SetJob) and w.state in TERMINAL_JOB_STATES:
                log.info(
                    "job %s %s%s",
                    w.job_id,
                    w.state.value,
                    f": {w.error}" if w.error else "",
                    extra={"job_id": w.job_id},
                )
