"""The guarded commit trusts a snapshot only while no row has been written since it was read."""

from __future__ import annotations

import pytest

from iris.cluster.controller import store
from iris.cluster.controller.effects import Change, Effects, MoveTask
from iris.rpc.enums import TaskState
from iris.testing.round_harness import RoundHarness


def _pending_task(h: RoundHarness) -> tuple[str, store.TaskSnapshot]:
    job = h.submit("one")
    task_id = f"{job}/0"
    with h.controller.db.read() as cur:
        return task_id, store.task_snapshots(cur, [task_id])[task_id]


def test_a_write_since_the_snapshot_makes_the_commit_read_its_guards_and_drop_the_stale_change() -> None:
    h = RoundHarness()
    task_id, before = _pending_task(h)
    with h.controller.db.read() as cur:
        read_at = store.writes_so_far(cur)
    with h.controller.db.transaction() as cur:  # a newer write to the same task
        cur.execute("UPDATE tasks SET version = version + 1 WHERE task_id = ?", (task_id,))
    move = MoveTask(before, before._replace(state=TaskState.UNSCHEDULABLE, error="x"))
    with h.controller.db.transaction() as cur:
        applied = store.commit(cur, Effects(changes=(Change((move,)),)), 1.0, read_at=read_at)
    assert len(applied.dropped) == 1 and not applied.changes
    assert h.task("/story/one").state is TaskState.PENDING


def test_a_trusted_guard_that_does_not_hold_aborts_the_whole_transaction() -> None:
    """Trusting the snapshot skips reading rows back, never the version each write names."""
    h = RoundHarness()
    task_id, before = _pending_task(h)
    wrong = before._replace(version=before.version + 7)  # as if read from a row that moved on
    move = MoveTask(wrong, wrong._replace(state=TaskState.UNSCHEDULABLE, error="x"))
    with pytest.raises(store.CommitInvariantError), h.controller.db.transaction() as cur:
        store.commit(cur, Effects(changes=(Change((move,)),)), 1.0, read_at=store.writes_so_far(cur))
    assert h.task("/story/one").state is TaskState.PENDING
