"""Gates (scheduler/gates.py) as tables, and the budget gate and fair share inside a pass."""

from __future__ import annotations

import pytest

from iris.cluster.controller.scheduler import ReasonCode, schedule
from iris.cluster.controller.scheduler.fairshare import UsageLedger
from iris.cluster.controller.scheduler.gates import (
    Budget,
    Held,
    admission_refusal,
    budget_gate,
    gate,
    held_by_user,
)
from iris.cluster.controller.scheduler.ordering import order_units

from .scheduler_helpers import BATCH, GB, INTER, PROD, occupied, placed, res, running, task, worker

CPU4 = Budget(cpu_millicores=4000)


@pytest.mark.parametrize(
    ("budget", "held", "ask", "count", "expected"),
    [
        (None, Held(cpu_millicores=99_000), res(8), 1, None),  # no budget: unlimited
        (CPU4, Held(), res(4), 1, None),  # exactly at the limit once placed
        (CPU4, Held(cpu_millicores=3000), res(1), 1, None),
        (CPU4, Held(cpu_millicores=4000), res(1), 1, "user budget: alice uses 4 of 4 cpu"),
        (CPU4, Held(cpu_millicores=2500), res(1), 2, "user budget: alice uses 2.5 of 4 cpu"),  # a gang of 2
        (CPU4, Held(cpu_millicores=4000), res(0), 1, None),  # asks for no cpu: never held by cpu
        (
            Budget(memory_bytes=8 * GB),
            Held(memory_bytes=8 * GB),
            res(0, mem=1),
            1,
            "user budget: alice uses 8GB of 8GB memory",
        ),
        (
            Budget(gpu=2),
            Held(gpu=2),
            res(1, device=("gpu", "h100", 1)),
            1,
            "user budget: alice uses 2 of 2 gpu",
        ),
        (Budget(gpu=2), Held(gpu=2), res(1, device=("tpu", "v5", 4)), 1, None),  # tpu is not gpu
        (
            Budget(tpu=4),
            Held(tpu=0),
            res(1, device=("tpu", "v5", 8)),
            1,
            "user budget: alice uses 0 of 4 tpu",
        ),
    ],
)
def test_budget_gate(budget, held, ask, count, expected) -> None:
    reason = budget_gate("alice", ask, count, budget, held)
    assert (reason[1] if reason else None) == expected
    if reason:
        assert reason[0] == ReasonCode.BUDGET


def test_the_everyone_budget_applies_to_users_without_their_own() -> None:
    budgets = {"*": Budget(cpu_millicores=1000), "bob": Budget(cpu_millicores=8000)}
    held = {"alice": Held(cpu_millicores=1000), "bob": Held(cpu_millicores=1000)}
    assert gate("alice", res(1), 1, budgets, held) is not None
    assert gate("bob", res(1), 1, budgets, held) is None


@pytest.mark.parametrize(
    ("band", "budget", "admin", "ask", "count", "refused"),
    [
        (INTER, None, False, res(1), 1, None),
        (PROD, None, True, res(1), 1, None),  # admins (everyone when auth is off)
        (PROD, None, False, res(1), 1, "PRODUCTION priority is for admins"),
        (PROD, Budget(max_band=PROD), False, res(1), 1, None),  # a budget allows it
        (INTER, Budget(max_band=BATCH), False, res(1), 1, "alice may submit at BATCH priority or lower"),
        (INTER, Budget(max_band=BATCH), True, res(1), 1, "alice may submit at BATCH priority or lower"),
        (BATCH, Budget(max_band=BATCH), False, res(1), 1, None),
        (INTER, CPU4, False, res(5), 1, "this job can never run within alice's budget: it needs 5 cpu"),
        (INTER, CPU4, False, res(2), 3, "it needs 6 cpu at once and the budget allows 4 cpu"),  # a gang
        (INTER, CPU4, False, res(4), 1, None),
    ],
)
def test_admission(band, budget, admin, ask, count, refused) -> None:
    why = admission_refusal("alice", band, ask, count, budget, admin=admin)
    if refused is None:
        assert why is None
    else:
        assert why is not None and refused in why


def test_held_by_user_counts_stopping_work_and_only_the_users_asked_for() -> None:
    run = [
        running("/alice/a/0", "w0", 2),
        running("/alice/b/0", "w0", 1, stopping=True),
        running("/bob/c/0", "w0"),
    ]
    held = held_by_user(run, {"alice"})
    assert set(held) == {"alice"} and held["alice"].cpu_millicores == 3000
    assert held_by_user(run, set()) == {}


def test_a_pass_places_a_user_up_to_the_budget_and_the_rest_waits_with_the_reason() -> None:
    run = [running("/alice/old/0", "w0", 1, band=INTER)]
    workers = occupied([worker("w0", cpu=16)], run)
    pending = [task(f"/alice/j/{i}") for i in range(4)] + [task("/bob/k/0", user="bob")]
    result = schedule(pending, workers, run, budgets={"alice": Budget(cpu_millicores=3000)})
    assert set(placed(result)) == {"/alice/j/0", "/alice/j/1", "/bob/k/0"}
    assert result.pending["/alice/j/2"].message == "user budget: alice uses 3 of 3 cpu"
    assert result.pending["/alice/j/2"].code == ReasonCode.BUDGET
    assert not result.preemptions


def test_a_held_task_never_preempts() -> None:
    run = [running("/bob/low/0", "w0", 4, band=BATCH)]
    workers = occupied([worker("w0", cpu=4)], run)
    result = schedule(
        [task("/alice/hi/0", band=PROD)], workers, run, budgets={"alice": Budget(cpu_millicores=0)}
    )
    assert not result.preemptions and result.pending["/alice/hi/0"].code == ReasonCode.BUDGET
    result = schedule([task("/alice/hi/0", band=PROD)], workers, run)
    assert [p.victim_task_id for p in result.preemptions] == ["/bob/low/0"]


def test_fair_share_orders_users_of_a_band_by_recent_usage_not_turns() -> None:
    alice = [task(f"/alice/a/{i}", submitted_at=i) for i in range(3)]
    bob = [task(f"/bob/b/{i}", user="bob", submitted_at=10 + i) for i in range(3)]
    units = alice + bob
    equal = [t.task_id for t in order_units(units)]
    assert equal[:4] == ["/alice/a/0", "/bob/b/0", "/alice/a/1", "/bob/b/1"]  # no usage: they alternate
    # alice used 10 cpu-minutes lately: bob's work goes first until his share catches up
    ordered = [t.task_id for t in order_units(units, {"alice": 600.0})]
    assert ordered == ["/bob/b/0", "/bob/b/1", "/bob/b/2", "/alice/a/0", "/alice/a/1", "/alice/a/2"]
    # a smaller lead buys bob one turn, then they alternate again
    ordered = [t.task_id for t in order_units(units, {"alice": 90.0})]
    assert ordered[:4] == ["/bob/b/0", "/bob/b/1", "/alice/a/0", "/bob/b/2"]


def test_the_usage_ledger_integrates_rates_and_decays() -> None:
    ledger = UsageLedger(half_life_s=100.0)
    ledger.observe(0.0, {"alice": 2.0})
    assert ledger.usage(0.0) == {}
    assert ledger.usage(10.0)["alice"] == pytest.approx(2 * 100 / 0.6931471805599453 * (1 - 0.5**0.1))
    ledger.observe(10.0, {})  # alice's work ended
    at_10 = ledger.usage(10.0)["alice"]
    assert ledger.usage(110.0)["alice"] == pytest.approx(at_10 / 2)  # one half-life later
    ledger.observe(5000.0, {})
    assert ledger.usage(5000.0) == {}  # long forgotten
