"""Kueue's admission kernel (pure): flavors, ordering, queueing strategy, preemption."""

from __future__ import annotations

from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from iris.testing.kueue_sim import Candidate, Flavor, QueueSpec, ResourceGroup, assign_flavors, plan_admission

GiB = 2**30


def queue(
    cpu: int = 8,
    memory: int = 16 * GiB,
    *,
    preemption: str = "LowerPriority",
    strategy: str = "BestEffortFIFO",
    extra_flavor: int = 0,
) -> QueueSpec:
    flavors = [Flavor("default-flavor", {"cpu": Fraction(cpu), "memory": Fraction(memory)})]
    if extra_flavor:
        flavors.append(Flavor("spot", {"cpu": Fraction(extra_flavor), "memory": Fraction(memory)}))
    return QueueSpec(
        "cq", (ResourceGroup(frozenset({"cpu", "memory"}), tuple(flavors)),), preemption, strategy
    )


def wl(
    key: str, cpu: float, *, priority: int = 0, order: int = 0, holding: bool = False, evicting: bool = False
) -> Candidate:
    requests = {"cpu": Fraction(cpu), "memory": Fraction(GiB)}
    assignment = {"cpu": "default-flavor", "memory": "default-flavor"} if holding else None
    return Candidate(key, "cq", priority, order, requests, assignment, evicting)


def test_admits_what_fits_in_order() -> None:
    plan = plan_admission(
        {"cq": queue(cpu=4)}, [wl("a", 2, order=1), wl("b", 2, order=2), wl("c", 1, order=3)]
    )
    assert set(plan.admit) == {"a", "b"}
    assert (
        plan.pending["c"]
        == "couldn't assign flavors to pod set main: insufficient unused quota for cpu in flavor default-flavor, 1 more needed"
    )


@pytest.mark.parametrize(
    ("requests", "message"),
    [
        (
            {"cpu": Fraction(24)},
            "couldn't assign flavors to pod set main: insufficient quota for cpu in flavor default-flavor, request > maximum capacity (24 > 8)",
        ),
        (
            {"nvidia.com/gpu": Fraction(1)},
            "couldn't assign flavors to pod set main: resource nvidia.com/gpu unavailable in ClusterQueue",
        ),
        (
            {"memory": Fraction(32 * GiB)},
            "couldn't assign flavors to pod set main: insufficient quota for memory in flavor default-flavor, request > maximum capacity (32Gi > 16Gi)",
        ),
    ],
)
def test_kueue_messages(requests: dict, message: str) -> None:
    assignment, reason = assign_flavors(requests, queue(), {})
    assert assignment is None and reason == message


def test_second_flavor_takes_the_overflow() -> None:
    plan = plan_admission({"cq": queue(cpu=2, extra_flavor=4)}, [wl("a", 2, order=1), wl("b", 3, order=2)])
    assert plan.admit["a"]["cpu"] == "default-flavor" and plan.admit["b"]["cpu"] == "spot"


def test_priority_before_age_and_best_effort_skips_the_blocked_head() -> None:
    workloads = [wl("old", 3, order=1), wl("urgent", 3, priority=10, order=2), wl("small", 1, order=3)]
    plan = plan_admission({"cq": queue(cpu=4, preemption="Never")}, workloads)
    assert set(plan.admit) == {"urgent", "small"} and "old" in plan.pending


def test_strict_fifo_blocks_behind_the_head() -> None:
    plan = plan_admission(
        {"cq": queue(cpu=4, strategy="StrictFIFO")}, [wl("big", 5, order=1), wl("small", 1, order=2)]
    )
    assert plan.admit == {} and "ahead in the queue" in plan.pending["small"]


def test_preemption_evicts_the_fewest_lowest_priority_workloads() -> None:
    holders = [wl("low-1", 2, priority=1, order=1, holding=True), wl("low-2", 2, priority=1, order=2, holding=True),
               wl("mid", 4, priority=5, order=3, holding=True)]  # fmt: skip
    plan = plan_admission({"cq": queue(cpu=8)}, [*holders, wl("high", 2, priority=9, order=4)])
    assert plan.evict == {"low-2": "high"}, (
        "the newest of the lowest priority goes first, and only one is needed"
    )
    assert plan.pending["high"].endswith("Pending the preemption of 1 workload(s)")


@pytest.mark.parametrize(
    ("policy", "victim_priority", "victim_order", "evicted"),
    [
        ("Never", 0, 1, False),
        ("LowerPriority", 0, 1, True),
        ("LowerPriority", 5, 1, False),
        ("LowerOrNewerEqualPriority", 5, 9, True),
        ("LowerOrNewerEqualPriority", 5, 1, False),
    ],
)
def test_preemption_policies(policy: str, victim_priority: int, victim_order: int, evicted: bool) -> None:
    plan = plan_admission(
        {"cq": queue(cpu=4, preemption=policy)},
        [
            wl("victim", 4, priority=victim_priority, order=victim_order, holding=True),
            wl("new", 4, priority=5, order=5),
        ],
    )
    assert ("victim" in plan.evict) is evicted


def test_waits_for_evictions_in_flight_and_holds_their_quota() -> None:
    workloads = [
        wl("leaving", 4, priority=0, order=1, holding=True, evicting=True),
        wl("high", 4, priority=9, order=2),
        wl("low", 4, priority=1, order=3),
    ]
    plan = plan_admission({"cq": queue(cpu=4)}, workloads)
    assert plan.evict == {} and plan.admit == {}
    assert "Pending the preemption" in plan.pending["high"] and "low" in plan.pending


_workloads = st.lists(
    st.tuples(st.integers(1, 6), st.integers(0, 3), st.booleans()),  # cpu, priority, holding
    max_size=12,
)


@settings(max_examples=200, deadline=None)
@given(_workloads)
def test_plans_never_overcommit_and_only_preempt_lower_priority(spec: list[tuple[int, int, bool]]) -> None:
    quota = queue(cpu=10)
    workloads, used = [], 0
    for index, (cpu, priority, holding) in enumerate(spec):
        holding = holding and used + cpu <= 10  # the starting state is itself within quota
        used += cpu if holding else 0
        workloads.append(wl(f"w{index}", cpu, priority=priority, order=index, holding=holding))
    plan = plan_admission({"cq": quota}, workloads)
    by_key = {w.key: w for w in workloads}
    admitted_cpu = sum(by_key[k].requests["cpu"] for k in plan.admit)
    assert used + admitted_cpu <= 10
    for victim, preemptor in plan.evict.items():
        assert by_key[victim].assignment is not None and by_key[victim].priority < by_key[preemptor].priority
    assert set(plan.admit).isdisjoint(plan.pending) and set(plan.admit) | set(plan.pending) == {
        w.key for w in workloads if w.assignment is None
    }
