"""Pending reasons a person can act on (exact wording), and the dry-run ``explain``."""

from __future__ import annotations

import pytest
from tests.controller.scheduler.scheduler_helpers import (
    PROD,
    con,
    occupied,
    res,
    running,
    task,
    worker,
)

from iris.cluster.controller.scheduler import explain, schedule

ZONES = [
    worker("eu-1", attrs={"zone": "eu-west"}),
    worker("eu-2", attrs={"zone": "eu-west"}),
    worker("eu-3", attrs={"zone": "eu-west"}),
    worker("us-1", attrs={"zone": "us-west"}),
    worker("bare"),
]


@pytest.mark.parametrize(
    ("case", "pending", "workers", "code", "message"),
    [
        ("no workers", task("/u/j/0"), [], "no_workers", "no workers registered"),
        (
            "none schedulable",
            task("/u/j/0"),
            [worker("a", schedulable=False), worker("b", schedulable=False)],
            "no_workers",
            "none of the 2 registered workers is schedulable (degraded, unhealthy or draining)",
        ),
        (
            "busy cpu",
            task("/u/j/0", cpu=8),
            [worker("worker-a", cpu=16, used=res(14, 0)), worker("worker-b", cpu=16, used=res(15, 0))],
            "resources",
            "needs 8 cpu; the largest free is 2 cpu on worker-a",
        ),
        (
            "busy memory",
            task("/u/j/0", mem=8),
            [worker("worker-a", mem=16, used=res(0, 12))],
            "resources",
            "needs 8GB memory; the largest free is 4GB on worker-a",
        ),
        (
            "full",
            task("/u/j/0", cpu=1),
            [worker("a", cpu=4, used=res(4, 0)), worker("b", cpu=4, used=res(4, 0))],
            "resources",
            "needs 1 cpu; no cpu is free on the 2 workers that could run it",
        ),
        (
            "busy, no single worker has it all",
            task("/u/j/0", cpu=2, mem=8),
            [worker("a", cpu=4, mem=16, used=res(3, 0)), worker("b", cpu=4, mem=16, used=res(0, 12))],
            "resources",
            "needs 2 cpu, 8GB memory; none of the 2 workers that could run it has all of that free now",
        ),
        (
            "never fits memory",
            task("/u/j/0", mem=64),
            [worker("a", mem=16), worker("b", mem=8)],
            "exceeds_capacity",
            "needs 64GB memory; no worker has more than 16GB capacity",
        ),
        (
            "never fits among matching",
            task("/u/j/0", cpu=8, constraints=(con("zone", "EQ", "eu-west"),)),
            ZONES,
            "exceeds_capacity",
            "needs 8 cpu; no matching worker has more than 4 cpu capacity",
        ),
        (
            "never fits jointly",
            task("/u/j/0", cpu=8, mem=32),
            [worker("a", cpu=8, mem=16), worker("b", cpu=4, mem=32)],
            "exceeds_capacity",
            "needs 8 cpu, 32GB memory; no worker has all of that capacity at once",
        ),
        (
            "constraint values",
            task("/u/j/0", constraints=(con("zone", "EQ", "us-east"),)),
            ZONES,
            "constraints",
            "no worker satisfies zone=us-east (3 workers have zone=eu-west, 1 has zone=us-west, 1 has no zone)",
        ),
        (
            "constraint on a missing attribute",
            task("/u/j/0", constraints=(con("rack", "EXISTS"),)),
            ZONES,
            "constraints",
            "no worker satisfies rack exists (no worker has attribute rack)",
        ),
        (
            "constraints only fail together",
            task("/u/j/0", constraints=(con("zone", "EQ", "us-west"), con("zone", "NE", "us-west"))),
            ZONES,
            "constraints",
            "no worker satisfies all of zone=us-west, zone!=us-west together "
            "(zone=us-west: 1 worker, zone!=us-west: 4 workers)",
        ),
        (
            "taints",
            task("/u/j/0"),
            [worker("t1", attrs={"taint:maintenance": "1"}), worker("t2", attrs={"taint:maintenance": "1"})],
            "constraints",
            "2 workers match its constraints but carry taints it does not tolerate (taint:maintenance on 2); "
            "tolerate a taint with an EXISTS constraint on its key",
        ),
        (
            "device kind",
            task("/u/j/0", device=("gpu", "h100", 2)),
            [
                worker("g1", device=("gpu", "a100", 8)),
                worker("g2", device=("gpu", "a100", 8)),
                worker("c1"),
            ],
            "constraints",
            "needs 2 gpu (h100); no matching worker offers that device (2 have gpu (a100), 1 has no device)",
        ),
        (
            "device count",
            task("/u/j/0", device=("gpu", "a100", 16)),
            [worker("g1", device=("gpu", "a100", 8))],
            "exceeds_capacity",
            "needs 16 gpu (a100); no matching worker has more than 8 gpu (a100) capacity",
        ),
    ],
)
def test_reason_wording(case, pending, workers, code, message):
    result = schedule([pending], workers)
    reason = result.pending[pending.task_id]
    assert (reason.code, reason.message) == (code, message), case
    assert reason.position == 1


def test_busy_and_never_fits_are_told_apart():
    workers = [worker("w", cpu=4, used=res(4, 0))]
    result = schedule([task("/u/busy/0", cpu=2), task("/u/never/0", cpu=8)], workers)
    assert result.pending["/u/busy/0"].code == "resources"
    assert result.pending["/u/never/0"].code == "exceeds_capacity"


def test_reason_reflects_what_this_pass_already_placed():
    result = schedule([task("/u/j/0", cpu=3), task("/u/j/1", cpu=3)], [worker("worker-a", cpu=4)])
    assert result.pending["/u/j/1"].message == "needs 3 cpu; the largest free is 1 cpu on worker-a"


def test_unschedulable_workers_do_not_count_as_matching():
    workers = [worker("drained", attrs={"zone": "us"}, schedulable=False), worker("eu", attrs={"zone": "eu"})]
    result = schedule([task("/u/j/0", constraints=(con("zone", "EQ", "us"),))], workers)
    assert result.pending["/u/j/0"].message == (
        "no worker satisfies zone=us (1 worker has zone=eu;"
        " 1 worker that does cannot take work now (degraded, unhealthy or draining))"
    )


def test_a_missing_attribute_held_only_by_a_degraded_worker_says_so():
    """A worker DEGRADED by a full disk: the job is not told that no worker has the attribute."""
    workers = [worker("full", attrs={"pool": "a"}, schedulable=False), worker("other")]
    result = schedule([task("/u/j/0", constraints=(con("pool", "EQ", "a"),))], workers)
    assert result.pending["/u/j/0"].message == (
        "no worker satisfies pool=a (no worker has attribute pool;"
        " 1 worker that does cannot take work now (degraded, unhealthy or draining))"
    )


def test_explain_names_the_workers():
    answer = explain([task("/u/j/0"), task("/u/j/1")], [worker("a"), worker("b")])
    assert answer.would_place
    assert sorted(answer.placements) == [("/u/j/0", "a"), ("/u/j/1", "b")]
    assert answer.summary() == "would place 2 tasks now on a, b"


def test_explain_gives_the_reason():
    answer = explain(task("/u/j/0", cpu=64), [worker("a")])
    assert not answer.would_place
    assert answer.summary() == "needs 64 cpu; no worker has more than 4 cpu capacity [exceeds_capacity]"


def test_explain_accounts_for_queued_work_ahead():
    ahead = [task("/other/j/0", user="bob", cpu=4, band=PROD)]
    answer = explain([task("/u/j/0", cpu=4), task("/u/j/1", cpu=1)], [worker("a", cpu=5)], queued=ahead)
    assert answer.placements == (("/u/j/1", "a"),)
    assert answer.summary() == (
        "1 of 2 tasks would wait: needs 4 cpu; no cpu is free on the 1 worker that could run it [resources] "
        "(1 would place now)"
    )


def test_explain_reports_preemptions_it_would_cause():
    held = [running("/batch/j/0", "a", cpu=4)]
    answer = explain(task("/u/j/0", cpu=4, band=PROD), occupied([worker("a", cpu=4)], held), held)
    assert [p.victim_task_id for p in answer.preemptions] == ["/batch/j/0"]
    assert answer.pending["/u/j/0"].code == "preempting"
