"""Each constraint operator, and taints that must be tolerated explicitly."""

from __future__ import annotations

import pytest
from tests.controller.scheduler.scheduler_helpers import con, placed, task, worker

from iris.cluster.controller.scheduler import satisfies, schedule

ZONE_A = {"zone": "a", "gen": "5"}
ZONE_B = {"zone": "b", "gen": "v5"}
BARE: dict[str, str] = {}


@pytest.mark.parametrize(
    ("constraint", "attrs", "expected"),
    [
        (con("zone", "EQ", "a"), ZONE_A, True),
        (con("zone", "EQ", "a"), ZONE_B, False),
        (con("zone", "EQ", "a"), BARE, False),
        (con("zone", "NE", "a"), ZONE_A, False),
        (con("zone", "NE", "a"), ZONE_B, True),
        (con("zone", "NE", "a"), BARE, True),
        (con("zone", "IN", values=["a", "c"]), ZONE_A, True),
        (con("zone", "IN", values=["a", "c"]), ZONE_B, False),
        (con("zone", "IN", values=["a", "c"]), BARE, False),
        (con("zone", "EXISTS"), ZONE_A, True),
        (con("zone", "EXISTS"), BARE, False),
        (con("zone", "NOT_EXISTS"), ZONE_A, False),
        (con("zone", "NOT_EXISTS"), BARE, True),
        (con("gen", "GT", "4"), ZONE_A, True),
        (con("gen", "GT", "5"), ZONE_A, False),
        (con("gen", "GE", "5"), ZONE_A, True),
        (con("gen", "LT", "5.5"), ZONE_A, True),
        (con("gen", "LT", "5"), ZONE_A, False),
        (con("gen", "LE", "5"), ZONE_A, True),
        (con("gen", "GT", "1"), ZONE_B, False),  # "v5" is not a number
        (con("gen", "LE", "9"), ZONE_B, False),
        (con("gen", "GT", "1"), BARE, False),
        (con("gen", "GE", "10"), {"gen": "9"}, False),  # numeric, not lexicographic
    ],
)
def test_operator_table(constraint, attrs, expected):
    assert satisfies(constraint, attrs) is expected
    result = schedule([task("/u/j/0", constraints=(constraint,))], [worker("w", attrs=attrs)])
    assert (placed(result) == {"/u/j/0": "w"}) is expected
    if not expected:
        assert result.pending["/u/j/0"].code == "constraints"


def test_all_constraints_must_hold():
    workers = [
        worker("a1", attrs={"zone": "a", "pool": "1"}),
        worker("a2", attrs={"zone": "a", "pool": "2"}),
        worker("b1", attrs={"zone": "b", "pool": "1"}),
    ]
    result = schedule([task("/u/j/0", constraints=(con("zone", "EQ", "a"), con("pool", "EQ", "1")))], workers)
    assert placed(result) == {"/u/j/0": "a1"}


def test_constraints_only_pick_matching_workers_among_many():
    workers = [worker(f"w{i}", cpu=8, attrs={"zone": "a" if i % 2 else "b"}) for i in range(10)]
    tasks = [task(f"/u/j/{i}", constraints=(con("zone", "EQ", "a"),)) for i in range(30)]
    result = schedule(tasks, workers)
    assert len(result.assignments) == 30
    assert {w for _, w in result.assignments} == {"w1", "w3", "w5", "w7", "w9"}


@pytest.mark.parametrize(
    ("constraints", "expected"),
    [
        ((), False),
        ((con("taint:maintenance", "EXISTS"),), True),
        ((con("taint:maintenance", "EQ", "true"),), True),
        ((con("taint:maintenance", "EQ", "false"),), False),  # tolerated, but the constraint fails
        ((con("taint:maintenance", "NE", "x"),), False),  # NE does not tolerate
        ((con("taint:other", "EXISTS"),), False),
    ],
)
def test_taints_must_be_tolerated(constraints, expected):
    tainted = worker("t", attrs={"taint:maintenance": "true"})
    result = schedule([task("/u/j/0", constraints=constraints)], [tainted])
    assert (placed(result) == {"/u/j/0": "t"}) is expected


def test_untainted_workers_take_tasks_that_tolerate_a_taint():
    result = schedule([task("/u/j/0", constraints=(con("taint:gpu-only", "EXISTS"),))], [worker("plain")])
    assert result.assignments == []  # the EXISTS constraint itself still has to hold
    assert result.pending["/u/j/0"].code == "constraints"


def test_task_must_tolerate_every_taint_of_a_worker():
    both = worker("t", attrs={"taint:a": "1", "taint:b": "1"})
    one = (con("taint:a", "EXISTS"),)
    two = (con("taint:a", "EXISTS"), con("taint:b", "EXISTS"))
    result = schedule([task("/u/one/0", constraints=one), task("/u/two/0", constraints=two)], [both])
    assert placed(result) == {"/u/two/0": "t"}


def test_integer_attribute_values_are_compared_as_text():
    result = schedule(
        [task("/u/j/0", constraints=(con("rack", "EQ", "7"),))], [worker("w", attrs={"rack": 7})]
    )
    assert placed(result) == {"/u/j/0": "w"}
