"""Per-user budgets in real rounds (the deterministic harness): the gate, the pending reason,
admission at submit, and budgets kept in the controller's DB."""

from __future__ import annotations

from pathlib import Path

import pytest

from iris.rpc.enums import PriorityBand, TaskState
from iris.rpc.errors import PermissionDenied
from iris.rpc.models import UserBudget
from iris.testing.round_harness import RoundHarness

S = TaskState


def reason(h: RoundHarness, job_id: str, index: int) -> str | None:
    with h.controller.db.read() as cur:
        row = cur.execute(
            "SELECT pending_reason FROM tasks WHERE task_id = ?", (f"{job_id}/{index}",)
        ).fetchone()
    return row[0]


def test_a_users_running_work_stays_within_the_budget_and_the_rest_waits_saying_why() -> None:
    h = RoundHarness(workers=2, cpu=4)
    h.controller.set_budget("story", UserBudget(cpu=3))
    job = h.submit("wide", replicas=5)
    h.step(rounds=2)
    assert h.task_states(job).count(S.RUNNING) == 3
    waiting = [i for i, s in enumerate(h.task_states(job)) if s is S.PENDING]
    assert len(waiting) == 2
    assert reason(h, job, waiting[0]) == "user budget: story uses 3 of 3 cpu"
    # one ends: exactly one more runs
    first_running = next(i for i, s in enumerate(h.task_states(job)) if s is S.RUNNING)
    h.fleet.finish(h.current_uid(job, first_running))
    h.step(rounds=3)
    assert h.task_states(job).count(S.RUNNING) == 3 and h.task_states(job).count(S.SUCCEEDED) == 1
    # raising the budget lets the rest run at once
    h.controller.set_budget("story", UserBudget(cpu=8))
    h.step(rounds=2)
    assert h.task_states(job).count(S.RUNNING) == 4


def test_removing_a_budget_frees_the_held_work() -> None:
    h = RoundHarness(workers=1, cpu=4)
    h.controller.set_budget("story", UserBudget(cpu=1))
    job = h.submit("two", replicas=2)
    h.step(rounds=2)
    assert sorted(h.task_states(job)) == sorted([S.RUNNING, S.PENDING])
    assert h.controller.remove_budget("story") and not h.controller.remove_budget("story")
    h.step(rounds=2)
    assert h.task_states(job) == [S.RUNNING, S.RUNNING]


def test_bands_at_submit() -> None:
    h = RoundHarness()
    c = h.controller
    prod = PriorityBand.PRODUCTION
    assert h.submit("admin-prod", priority=prod)  # admins (everyone with auth off) may
    spec = c.specs.job_spec("/story/admin-prod").model_copy(update={"name": "user-prod"})
    with pytest.raises(PermissionDenied, match="PRODUCTION priority is for admins"):
        c.submit(spec, user="story", admin=False)
    c.set_budget("story", UserBudget(max_band=prod))
    assert c.submit(spec, user="story", admin=False) == "/story/user-prod"
    c.set_budget("story", UserBudget(max_band=PriorityBand.BATCH))
    inter = spec.model_copy(update={"name": "inter", "priority": PriorityBand.INTERACTIVE})
    with pytest.raises(PermissionDenied, match="story may submit at BATCH priority or lower"):
        c.submit(inter, user="story")
    with pytest.raises(PermissionDenied, match="can never run within story's budget"):
        c.set_budget("story", UserBudget(cpu=0.5))
        c.submit(inter.model_copy(update={"priority": PriorityBand.BATCH}), user="story")


def test_budgets_live_in_the_db_and_config_defaults_apply_under_them(tmp_path: Path) -> None:
    h = RoundHarness(state_dir=tmp_path)
    h.controller.set_budget("story", UserBudget(cpu=2, memory="4GB"))
    h.restart()
    budgets = h.controller.budgets
    budgets.set_defaults({"*": UserBudget(cpu=1), "story": UserBudget(cpu=16)})
    got = budgets.get("story")
    assert got is not None and got.source == "api" and got.budget.cpu_millicores == 2000
    other = budgets.get("carol")
    assert other is not None and other.user == "*" and other.source == "config"
    assert [i.user for i in budgets.list()] == ["*", "story"]
    assert budgets.remove("story")
    assert budgets.get("story").source == "config"  # type: ignore[union-attr]
