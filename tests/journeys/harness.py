"""A backend-neutral harness for journeys: a real cluster, a client, and invariants after every step.

A journey reads as a story (submit -> run -> fail -> retry -> succeed) and calls ``step`` whenever
it waits, so the invariants are checked on every state the cluster passes through:
- no task has two active attempts at once;
- no worker is given more than its capacity;
- a finished task or job is never reopened.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TypeVar

from iris.client import CoschedulingConfig, Entrypoint, IrisClient, LocalCluster, ResourceSpec, TaskState
from iris.rpc.enums import ACTIVE_TASK_STATES, TERMINAL_JOB_STATES, TERMINAL_TASK_STATES
from iris.rpc.errors import NotImplementedForBackend
from iris.rpc.models import JobDetail

T = TypeVar("T")


@dataclass
class Journey:
    client: IrisClient
    cluster: LocalCluster
    backend: str
    finished_tasks: dict[str, str] = field(default_factory=dict)
    finished_jobs: dict[str, str] = field(default_factory=dict)
    checks: int = 0

    def check_invariants(self) -> None:
        jobs = self.client.list_jobs(limit=1000).jobs
        for summary in jobs:
            if summary.job_id in self.finished_jobs:
                assert summary.state.value == self.finished_jobs[summary.job_id], (
                    f"job {summary.job_id} reopened"
                )
            elif summary.state in TERMINAL_JOB_STATES:
                self.finished_jobs[summary.job_id] = summary.state.value
            detail = self.client.job(summary.job_id).detail()
            for task in detail.tasks:
                active = [a for a in task.attempts if a.state in ACTIVE_TASK_STATES]
                assert len(active) <= 1, f"task {task.task_id} has {len(active)} active attempts"
                previous = self.finished_tasks.get(task.task_id)
                if previous is not None:
                    assert task.state.value == previous, (
                        f"task {task.task_id} reopened: {previous} -> {task.state}"
                    )
                elif task.state in TERMINAL_TASK_STATES:
                    self.finished_tasks[task.task_id] = task.state.value
        if self.backend == "worker":
            try:
                workers = self.client.workers().workers
            except NotImplementedForBackend:
                workers = []
            for w in workers:
                assert w.used.cpu_millicores <= w.capacity.cpu_millicores, (
                    f"{w.worker_id} over-committed on cpu"
                )
                assert w.used.memory_bytes <= w.capacity.memory_bytes, (
                    f"{w.worker_id} over-committed on memory"
                )
        self.checks += 1

    def step(self, condition: Callable[[], T], *, timeout: float = 60.0, what: str = "condition") -> T:
        """Wait for ``condition``, checking the invariants on every poll."""
        deadline = time.monotonic() + timeout
        last: T | None = None
        while time.monotonic() < deadline:
            self.check_invariants()
            last = condition()
            if last:
                return last
            time.sleep(0.1)
        raise AssertionError(f"timed out after {timeout}s waiting for {what} (last: {last!r})")


# Task 0 of a 2-task gang fails on its first attempt while task 1 still runs: the gang must bounce as one.
BOUNCING_GANG_SCRIPT = (
    'if [ "$IRIS_ATTEMPT_NUMBER" = 0 ]; then if [ "$IRIS_TASK_INDEX" = 0 ]; then sleep 0.3; exit 1; fi; sleep 30; fi;'
    " sleep 0.3"
)


def run_bouncing_gang(j: Journey, name: str, resources: ResourceSpec) -> JobDetail:
    """Submit the bouncing gang and wait for it, checking on every poll that it is never split."""
    job = j.client.submit(
        Entrypoint.from_command("sh", "-c", BOUNCING_GANG_SCRIPT),
        name=name,
        replicas=2,
        resources=resources,
        coscheduling=CoschedulingConfig(group_by="pool"),
        max_retries_failure=1,
    )

    def never_split() -> JobDetail | None:
        detail = job.detail()
        states = {t.state for t in detail.tasks}
        assert not (TaskState.PENDING in states and states & {TaskState.RUNNING, TaskState.BUILDING}), (
            f"gang split: {states}"
        )
        return detail if detail.state in TERMINAL_JOB_STATES else None

    detail = j.step(never_split, what="gang done")
    assert [len(t.attempts) for t in detail.tasks] == [2, 2]
    assert detail.tasks[0].attempts[0].state is TaskState.FAILED
    assert detail.tasks[1].attempts[0].state is TaskState.COSCHED_FAILED
    return detail


@contextmanager
def journey_cluster(
    backend: str, *, workers: int = 3, worker_cpu: str = "2", attributes: list[dict[str, str]] | None = None
) -> Iterator[Journey]:
    cluster = LocalCluster(
        workers=workers,
        backend=backend,
        worker_cpu=worker_cpu,
        worker_memory="4GB",
        worker_attributes=attributes,
        tick_s=0.5,
        worker_grace_s=3.0,
    )
    cluster.start()
    client = IrisClient(cluster.url)
    try:
        yield Journey(client=client, cluster=cluster, backend=backend)
    finally:
        client.close()
        cluster.stop()
