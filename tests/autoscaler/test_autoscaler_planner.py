"""Table-driven tests of the pure planner: snapshot in, decisions out."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from iris.cluster.controller.autoscaler import (
    ActionKind,
    AutoscalerPlan,
    AutoscalerSnapshot,
    BackoffState,
    DemandEntry,
    GroupSnapshot,
    plan,
    unfittable_reason,
)
from iris.rpc.models import Constraint, ResourceSpec

from .helpers import TIMINGS, booting, demand, failed, group, ready, snap

NOW = 1000.0


@dataclass
class Case:
    groups: list[GroupSnapshot]
    demand: list[DemandEntry] = field(default_factory=list)
    creates: dict[str, int] = field(default_factory=dict)  # group -> slices created (others: 0)
    terminates: set[str] = field(default_factory=set)
    unmet_tasks: int = 0
    status: dict[str, str] = field(default_factory=dict)  # group -> substring of its status line


CPU = group("cpu", max_slices=4)

CASES = {
    "scale from zero: one slice per task that fills a machine": Case(
        [snap(CPU)], [demand(tasks=3)], creates={"cpu": 3}, status={"cpu": "scaling up 3 slice(s)"}
    ),
    "small tasks pack onto one machine": Case(
        [snap(CPU)], [demand(tasks=4, cpu=0.5, memory="400MB")], creates={"cpu": 2}
    ),
    "memory is packed too": Case([snap(CPU)], [demand(tasks=3, cpu=0.1, memory="500MB")], creates={"cpu": 2}),
    "several machines per slice": Case(
        [snap(group("cpu", num_vms=2, max_slices=5))], [demand(tasks=5)], creates={"cpu": 3}
    ),
    "two jobs share the partly filled slice": Case(
        [snap(group("cpu", num_vms=2, max_slices=5))],
        [demand("/u/a", tasks=1), demand("/u/b", tasks=1)],
        creates={"cpu": 1},
    ),
    "buffer with no demand": Case([snap(group("cpu", buffer_slices=1))], creates={"cpu": 1}),
    "buffer is on top of busy slices": Case(
        [snap(group("cpu", buffer_slices=1), ready("cpu-1"), ready("cpu-2"))], creates={"cpu": 1}
    ),
    "an idle slice already is the buffer": Case(
        [snap(group("cpu", buffer_slices=1), ready("cpu-1", idle_since=NOW - 500))], creates={}
    ),
    "max caps the creates and the rest is unmet": Case(
        [snap(CPU)],
        [demand(tasks=10)],
        creates={"cpu": 4},
        unmet_tasks=6,
        status={"cpu": "at max_slices (4)"},
    ),
    "busy slices count against max": Case(
        [snap(CPU, ready("cpu-1"), ready("cpu-2"), ready("cpu-3"))],
        [demand(tasks=3)],
        creates={"cpu": 1},
        unmet_tasks=2,
    ),
    "min floor without demand": Case([snap(group("cpu", min_slices=2))], creates={"cpu": 2}),
    "idle slices at the floor stay": Case(
        [snap(group("cpu", min_slices=2), ready("cpu-1", NOW - 900), ready("cpu-2", NOW - 900))],
        status={"cpu": "steady: 2 ready"},
    ),
    "booting slices absorb demand": Case(
        [snap(CPU, booting("cpu-1", created=NOW - 10))],
        [demand(tasks=1)],
        creates={},
        status={"cpu": "waiting for 1 booting slice(s)"},
    ),
    "a gang needs one whole slice big enough": Case(
        [
            snap(group("small", num_vms=2, priority=1)),
            snap(group("big", num_vms=4, priority=2)),
        ],
        [demand(tasks=4, group_by="slice")],
        creates={"big": 1},
    ),
    "two gangs need two slices even if they would pack": Case(
        [snap(group("big", num_vms=4, cpu=8))],
        [demand("/u/g1", tasks=2, group_by="slice"), demand("/u/g2", tasks=2, group_by="slice")],
        creates={"big": 2},
    ),
    "a gang grouped by a group attribute": Case(
        [snap(group("pod", num_vms=2, attrs={"pool": "p1"}))],
        [demand(tasks=2, group_by="pool")],
        creates={"pod": 1},
    ),
    "a gang grouped by a missing attribute fits nowhere": Case(
        [snap(group("pod", num_vms=2))], [demand(tasks=2, group_by="rack")], unmet_tasks=2
    ),
    "idle slice removed after the delay": Case(
        [snap(CPU, ready("cpu-1", NOW - 70), ready("cpu-2", NOW - 30))],
        terminates={"cpu-1"},
        status={"cpu": "idle: slice cpu-2 idle 30s"},
    ),
    "longest idle first, never below target": Case(
        [
            snap(
                group("cpu", min_slices=2),
                ready("cpu-1", NOW - 100),
                ready("cpu-2", NOW - 400),
                ready("cpu-3", NOW - 200),
            )
        ],
        terminates={"cpu-2"},
    ),
    "busy slices are never removed": Case([snap(CPU, ready("cpu-1"), ready("cpu-2"))], terminates=set()),
    "an idle slice with routed demand is kept": Case(
        [snap(CPU, ready("cpu-1", NOW - 500))], [demand(tasks=1)], terminates=set(), creates={}
    ),
    "boot timeout terminates and replaces": Case(
        [snap(CPU, booting("cpu-1", created=NOW - 400), next_seq=2)],
        [demand(tasks=1)],
        creates={"cpu": 1},
        terminates={"cpu-1"},
    ),
    "a failed boot is terminated": Case([snap(CPU, failed("cpu-1"))], terminates={"cpu-1"}),
    "backoff sends demand to the next group": Case(
        [
            snap(
                group("spot", priority=1),
                failed("spot-3"),
                backoff=BackoffState(failure_times=(NOW - 60, NOW - 30)),
            ),
            snap(group("ondemand", priority=2)),
        ],
        [demand(tasks=2)],
        creates={"ondemand": 2},
        terminates={"spot-3"},
        status={"spot": "backoff: 3 boot failures in 10m"},
    ),
    "a group in backoff creates nothing, not even for min": Case(
        [
            snap(
                group("cpu", min_slices=1),
                backoff=BackoffState(until=NOW + 30, reason="3 boot failures in 10m"),
            )
        ],
        [demand(tasks=1)],
        unmet_tasks=1,
        status={"cpu": "retrying in 30s"},
    ),
    "an expired backoff creates again": Case(
        [snap(CPU, backoff=BackoffState(until=NOW - 1, level=1, reason="3 boot failures in 10m"))],
        [demand(tasks=1)],
        creates={"cpu": 1},
    ),
    "rate limit per evaluation": Case(
        [snap(group("cpu", max_slices=20, max_creates_per_minute=100))],
        [demand(tasks=15)],
        creates={"cpu": 10},
        status={"cpu": "rate limited: 5 slice(s) deferred"},
    ),
    "rate limit per minute counts recent creates": Case(
        [
            snap(
                group("cpu", max_slices=20, max_creates_per_minute=5),
                recent=(NOW - 10, NOW - 20, NOW - 30, NOW - 70),
            )
        ],
        [demand(tasks=4)],
        creates={"cpu": 2},
    ),
    "constraints pick the group with the attribute": Case(
        [
            snap(group("a", priority=1, attrs={"zone": "a"})),
            snap(group("b", priority=2, attrs={"zone": "b"})),
        ],
        [demand(tasks=1, constraints=(Constraint(key="zone", value="b"),))],
        creates={"b": 1},
    ),
    "the preferred group wins when both fit": Case(
        [snap(group("b", priority=20)), snap(group("a", priority=10))], [demand(tasks=1)], creates={"a": 1}
    ),
    "a full preferred group overflows into the next": Case(
        [snap(group("a", priority=1, max_slices=1)), snap(group("b", priority=2))],
        [demand(tasks=3)],
        creates={"a": 1, "b": 2},
    ),
    "existing booting capacity in a lower group is used before creating": Case(
        [snap(group("a", priority=1)), snap(group("b", priority=2), booting("b-1", created=NOW - 5))],
        [demand(tasks=1)],
        creates={},
    ),
    "a tainted group only takes tolerating jobs": Case(
        [snap(group("gpuish", priority=1, attrs={"taint:gpu": "yes"})), snap(group("cpu", priority=2))],
        [
            demand("/u/plain", tasks=1),
            demand("/u/ok", tasks=1, constraints=(Constraint(key="taint:gpu", op="EXISTS"),)),
        ],
        creates={"cpu": 1, "gpuish": 1},
    ),
    "accelerator demand goes to the accelerator group": Case(
        [
            snap(group("cpu", priority=1)),
            snap(group("gpu", priority=2, cpu=4, memory="8GB", device=("gpu", "a100", 8))),
        ],
        [demand(tasks=2, device=("gpu", "a100", 4))],
        creates={"gpu": 1},
    ),
    "work that fits no group is unmet": Case([snap(CPU)], [demand(tasks=2, cpu=64)], unmet_tasks=2),
}


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_plan_table(case: Case) -> None:
    result = plan(AutoscalerSnapshot(tuple(case.groups), tuple(case.demand), TIMINGS), NOW)
    created: dict[str, int] = {}
    for c in result.creates:
        created[c.group] = created.get(c.group, 0) + 1
    assert created == case.creates
    assert {t.slice_id for t in result.terminates} == case.terminates
    assert sum(len(u.task_ids) for u in result.unmet) == case.unmet_tasks
    for name, text in case.status.items():
        assert text in result.group(name).status, result.group(name).status


def run(*groups: GroupSnapshot, entries: tuple[DemandEntry, ...] = (), now: float = NOW) -> AutoscalerPlan:
    return plan(AutoscalerSnapshot(tuple(groups), entries, TIMINGS), now)


def test_slice_ids_follow_the_group_sequence() -> None:
    result = run(snap(CPU, next_seq=7), entries=(demand(tasks=2),))
    assert [c.slice_id for c in result.creates] == ["cpu-7", "cpu-8"]
    assert result.group("cpu").next_seq == 9
    assert result.group("cpu").recent_creates == (NOW, NOW)
    assert [a.action for a in result.actions] == [ActionKind.SCALE_UP, ActionKind.SCALE_UP]
    assert "2 pending task(s) need 2 slice(s)" in result.creates[0].reason


def test_boot_timeout_is_a_boot_failure_with_a_reason() -> None:
    result = run(snap(CPU, booting("cpu-1", created=NOW - 301)))
    (terminate,) = result.terminates
    assert terminate.boot_failure
    assert "boot timeout: not ready after 5m01s (limit 5m)" in terminate.reason
    assert result.group("cpu").backoff.failure_times == (NOW,)
    assert result.actions[0].action is ActionKind.BOOT_TIMEOUT


def test_group_boot_timeout_override() -> None:
    result = run(snap(group("cpu", boot_timeout_s=30), booting("cpu-1", created=NOW - 31)))
    assert [t.slice_id for t in result.terminates] == ["cpu-1"]


def test_a_slice_failing_after_ready_is_not_a_boot_failure() -> None:
    result = run(snap(CPU, failed("cpu-1", was_ready=True)))
    (terminate,) = result.terminates
    assert not terminate.boot_failure
    assert result.group("cpu").backoff.failure_times == ()
    assert result.actions[0].action is ActionKind.SLICE_FAILED


def test_backoff_grows_exponentially_and_is_capped() -> None:
    durations = []
    backoff = BackoffState()
    now = NOW
    for _ in range(6):
        # three failed boots in one evaluation trigger a backoff at the current level
        slices = [failed(f"cpu-{i}", created=now - 5) for i in range(3)]
        result = run(snap(CPU, *slices, backoff=backoff), now=now)
        backoff = result.group("cpu").backoff
        durations.append(backoff.until - now)
        now = backoff.until + 1
    assert durations == [60, 120, 240, 480, 600, 600]


def test_backoff_level_resets_once_a_slice_becomes_ready() -> None:
    backoff = BackoffState(level=3, until=NOW - 100, last_success=0.0)
    result = run(snap(CPU, ready("cpu-1", created=NOW - 50)), now=NOW)
    assert result.group("cpu").backoff.level == 0
    assert backoff.level == 3  # inputs are never mutated


def test_old_failures_fall_out_of_the_window() -> None:
    old = BackoffState(failure_times=(NOW - 700, NOW - 650))
    result = run(snap(CPU, failed("cpu-1"), backoff=old))
    backoff = result.group("cpu").backoff
    assert not backoff.active(NOW)
    assert backoff.failure_times == (NOW,)


def test_hints_explain_pending_jobs() -> None:
    result = run(
        snap(group("cpu", max_slices=1), booting("cpu-1", created=NOW - 5)),
        entries=(demand("/u/waits", tasks=1), demand("/u/huge", tasks=1, cpu=64), demand("/u/over", tasks=1)),
    )
    assert result.hints["/u/waits"].startswith("waiting for scale group cpu")
    assert "needs 64 cpu per task, a machine has 1" in result.hints["/u/huge"]
    assert "cpu at max_slices (1)" in result.hints["/u/over"]


def test_unfittable_reason_names_every_group() -> None:
    groups = [group("cpu", cpu=8, attrs={"zone": "a"}), group("gpu", cpu=8, device=("gpu", "h100", 8))]
    assert unfittable_reason(ResourceSpec(cpu=4), [], groups) is None
    reason = unfittable_reason(ResourceSpec(cpu=64), [], groups)
    assert (
        reason == "cpu: needs 64 cpu per task, a machine has 8; gpu: needs 64 cpu per task, a machine has 8"
    )
    reason = unfittable_reason(ResourceSpec(cpu=1), [Constraint(key="zone", value="b")], groups)
    assert reason is not None and "constraint zone=b does not hold (zone=a)" in reason
    assert "no 'zone' attribute" in reason
    gpu = ResourceSpec(cpu=1, device={"type": "gpu", "variant": "a100", "count": 1})
    assert "needs gpu a100, machines have h100" in (unfittable_reason(gpu, [], groups) or "")
    assert "a gang of 4 needs a slice of at least 4 machines" in (
        unfittable_reason(ResourceSpec(cpu=1), [], groups, gang_size=4, group_by="slice") or ""
    )
    assert unfittable_reason(ResourceSpec(cpu=64), [], []) is None


def test_waiting_tasks_count_those_a_full_group_cannot_take() -> None:
    """The dashboard's demand: tasks waiting for the group, not only those it found slices for."""
    full = snap(group("cpu", max_slices=2), ready("cpu-1"), ready("cpu-2"))
    decision = run(full, entries=(demand(tasks=3),)).group("cpu")
    assert decision.demand_tasks == 0 and decision.demand_slices == 0
    assert decision.waiting_tasks == 3
    assert run(snap(CPU), entries=(demand(tasks=3),)).group("cpu").waiting_tasks == 3
