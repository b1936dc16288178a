"""PendingQueue: a pass looks at new work only, unless room grew for parked work or backoff expired."""

from __future__ import annotations

from dataclasses import replace

from iris.cluster.controller.scheduler import Resources, TaskRequest, WorkerView
from iris.cluster.controller.scheduler.queue import FULL_PASS_SHARE, PendingQueue
from iris.rpc.enums import PriorityBand

GB = 1000**3
BIG = Resources(8000, 8 * GB)
SMALL = Resources(500, GB)


def task(task_id: str, resources: Resources = BIG) -> TaskRequest:
    job_id = task_id.rsplit("/", 1)[0]
    return TaskRequest(task_id, job_id, "u", resources, (), PriorityBand.INTERACTIVE, 1, 0.0, 0.0)


def worker(used_cpu: int, *, schedulable: bool = True) -> WorkerView:
    capacity = Resources(4000, 16 * GB)
    return WorkerView("w", capacity, Resources(used_cpu, 0), {}, schedulable=schedulable)


def parked_queue() -> PendingQueue:
    """Two 8-CPU tasks parked after a full pass over a 4-CPU worker."""
    queue = PendingQueue()
    views = [worker(0)]
    scope = queue.scope(views, now=0.0)
    assert scope.full  # nothing is known at first
    queue.passed(scope, [task("/u/big/0"), task("/u/big/1")], placed=[], now=0.0)
    return queue


def test_nothing_new_and_no_new_room_means_an_empty_pass() -> None:
    queue = parked_queue()
    scope = queue.scope([worker(0)], now=1.0)
    assert scope.empty and set(queue.parked) == {"/u/big/0", "/u/big/1"}
    assert [r.task_id for r in queue.unplaced()] == ["/u/big/0", "/u/big/1"]


def test_new_work_is_looked_at_alone_and_parked_when_it_does_not_place() -> None:
    queue = parked_queue()
    queue.job_submitted("/u/new")
    queue.task_pending_again("/u/big/1")  # a retry is new work too
    scope = queue.scope([worker(0)], now=1.0)
    assert not scope.full and scope.jobs == {"/u/new"} and scope.tasks == {"/u/big/1"}
    queue.passed(scope, [task("/u/new/0", SMALL), task("/u/big/1")], placed=["/u/new/0"], now=1.0)
    assert set(queue.parked) == {"/u/big/0", "/u/big/1"}
    assert queue.scope([worker(500)], now=1.5).empty  # the dirty sets were consumed


def test_room_that_grows_into_a_parked_shape_brings_a_full_pass() -> None:
    queue = parked_queue()
    queue.passed(queue.scope([worker(0)], now=0.5), [task("/u/small/0", SMALL)], placed=[], now=0.5)
    assert queue.scope([worker(3800)], now=1.0).empty  # room shrank (something started)
    assert queue.scope([worker(3600)], now=1.1).empty  # grew, but no parked shape fits 0.4 CPU
    assert queue.scope([worker(3000)], now=1.2).full  # 1 CPU free: the small parked task fits


def test_room_that_grows_but_fits_no_parked_shape_changes_nothing() -> None:
    queue = parked_queue()
    assert queue.scope([worker(3000)], now=1.0).empty
    assert queue.scope([worker(0)], now=1.1).empty  # 4 free CPUs still fit no 8-CPU task


def test_a_worker_that_becomes_schedulable_or_appears_counts_as_new_room() -> None:
    queue = PendingQueue()
    queue.passed(queue.scope([worker(0, schedulable=False)], now=0.0), [task("/u/s/0", SMALL)], [], now=0.0)
    assert queue.scope([worker(0, schedulable=False)], now=0.5).empty
    assert queue.scope([worker(0)], now=0.6).full
    queue.passed(queue.scope([worker(4000)], now=0.7), [task("/u/s/0", SMALL)], [], now=0.7)
    newcomer = replace(worker(0), worker_id="w2")
    assert queue.scope([worker(4000), newcomer], now=0.8).full


def test_parked_work_is_looked_at_again_after_a_growing_backoff() -> None:
    queue = parked_queue()  # full pass at t=0 placed nothing: due again at backoff_min_s
    assert queue.scope([worker(0)], now=queue.backoff_min_s - 0.1).empty
    due = queue.scope([worker(0)], now=queue.backoff_min_s)
    assert due.full
    queue.passed(due, [task("/u/big/0"), task("/u/big/1")], placed=[], now=queue.backoff_min_s)
    assert queue.full_due_at == queue.backoff_min_s * 3  # doubled after another pass that placed nothing
    for _ in range(10):
        now = queue.full_due_at
        scope = queue.scope([worker(0)], now=now)
        assert scope.full
        queue.passed(scope, [task("/u/big/0")], [], now=now)
    assert queue.backoff_s == queue.backoff_max_s
    queue.passed(queue.scope([worker(0)], now=queue.full_due_at), [task("/u/big/0")], ["/u/big/0"], now=1e6)
    assert queue.backoff_s == queue.backoff_min_s  # a pass that placed something resets it
    queue.invalidate()
    assert queue.scope([worker(0)], now=1e6 + 1).full


def test_forgotten_tasks_leave_the_parked_set() -> None:
    queue = parked_queue()
    queue.forget(["/u/big/0"])
    assert set(queue.parked) == {"/u/big/1"}


def test_work_that_arrives_while_a_pass_runs_is_left_for_the_next_pass() -> None:
    queue = parked_queue()
    queue.job_submitted("/u/first")
    scope = queue.scope([worker(0)], now=1.0)
    queue.job_submitted("/u/second")  # committed after the pass read its snapshot
    queue.task_pending_again("/u/big/0")
    queue.passed(scope, [task("/u/first/0")], placed=[], now=1.0)
    following = queue.scope([worker(0)], now=1.1)
    assert not following.full and following.jobs == {"/u/second"} and following.tasks == {"/u/big/0"}
    # The same when the pass is a full one.
    queue.invalidate()
    full = queue.scope([worker(0)], now=1.2)
    queue.job_submitted("/u/third")
    queue.passed(full, [task("/u/second/0"), task("/u/big/0"), task("/u/big/1")], placed=[], now=1.2)
    assert queue.scope([worker(0)], now=1.3).jobs == {"/u/third"}


def test_a_task_that_leaves_pending_while_a_pass_runs_is_not_parked_by_it() -> None:
    queue = parked_queue()
    queue.invalidate()
    scope = queue.scope([worker(0)], now=1.0)
    queue.forget(["/u/big/1"])  # its job was stopped after the pass read it as pending
    queue.passed(scope, [task("/u/big/0"), task("/u/big/1")], placed=[], now=1.0)
    assert set(queue.parked) == {"/u/big/0"}
    queue.job_submitted("/u/new")
    scoped = queue.scope([worker(0)], now=1.1)
    queue.forget(["/u/new/0"])
    queue.passed(scoped, [task("/u/new/0")], placed=[], now=1.1)
    assert set(queue.parked) == {"/u/big/0"}


def test_a_costly_full_pass_that_placed_nothing_comes_back_later_than_the_backoff() -> None:
    queue = parked_queue()
    scope = queue.scope([worker(0)], now=queue.full_due_at)
    queue.passed(scope, [task("/u/big/0"), task("/u/big/1")], placed=[], now=10.0, took_s=3.0)
    assert queue.full_due_at == 10.0 + 3.0 / FULL_PASS_SHARE  # far beyond the 4 s backoff
    scope = queue.scope([worker(0)], now=queue.full_due_at)
    queue.passed(scope, [task("/u/big/0")], placed=["/u/big/1"], now=80.0, took_s=3.0)
    assert queue.full_due_at == 80.0 + queue.backoff_min_s  # progress: back to the short backoff
