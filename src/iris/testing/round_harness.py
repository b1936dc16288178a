"""A deterministic controller for scenario tests: in process, a fake clock, an in-memory fleet.

Nothing runs in the background: a test steps ``run_round()`` (or the two halves of a round,
``plan_round`` and ``apply_round``, to land a command between them) and asserts on the store
and on what the fleet was sent. The controller, its store and its kernels are the real ones.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from iris.cluster.controller import store
from iris.cluster.controller.auth import Authenticator
from iris.cluster.controller.backend import BackendDescriptor, BackendKind
from iris.cluster.controller.controller import Controller, create_controller
from iris.rpc.enums import JobState, PriorityBand, TaskState
from iris.rpc.models import Entrypoint, JobSpec, RegisterRequest, ResourceSpec
from iris.testing.simulated_workers import InMemoryFleet


class FakeClock:
    def __init__(self, start: float = 1_000_000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@dataclass(frozen=True)
class TaskView:
    task_id: str
    state: TaskState
    attempts: tuple[tuple[str, TaskState, str | None], ...]  # (uid, state, worker) oldest first
    error: str | None


class RoundHarness:
    def __init__(
        self,
        *,
        workers: int = 2,
        cpu: float = 4,
        kind: BackendKind = BackendKind.WORKER,
        state_dir: Path | None = None,
        fleet: InMemoryFleet | None = None,
        clock: FakeClock | None = None,
        worker_grace_s: float = 10.0,
        register: bool = True,
        attributes: dict[str, str] | None = None,
        auth: Authenticator | None = None,
    ) -> None:
        self.clock = clock or FakeClock()
        self.auth = auth
        self.fleet = fleet or InMemoryFleet()
        self.kind = kind
        self.state_dir = state_dir
        self.worker_grace_s = worker_grace_s
        self.controller = self._build()
        self.worker_ids = [f"w{i}" for i in range(workers)]
        if register and kind is BackendKind.WORKER:
            for worker_id in self.worker_ids:
                self.controller.register_worker(
                    RegisterRequest(
                        worker_id=worker_id,
                        address=f"{worker_id}.sim:1",
                        capacity=ResourceSpec(cpu=cpu, memory="16GB"),
                        attributes=attributes or {},
                    )
                )

    def _build(self) -> Controller:
        return create_controller(
            BackendDescriptor(backend_id="harness", kind=self.kind),
            state_dir=self.state_dir,
            backend=self.fleet,
            clock=self.clock,
            worker_grace_s=self.worker_grace_s,
            tick_interval_s=1.0,
            auth=self.auth,
        )

    def restart(self) -> None:
        """A new controller process on the same state directory (the fleet keeps running)."""
        self.controller.db.close()
        self.controller = self._build()

    # ---- driving

    def submit(
        self,
        name: str,
        *,
        replicas: int = 1,
        cpu: float = 1,
        priority: PriorityBand = PriorityBand.INTERACTIVE,
        **spec: Any,
    ) -> str:
        return self.controller.submit(
            JobSpec(
                name=name,
                entrypoint=Entrypoint.from_command("true"),
                replicas=replicas,
                resources=ResourceSpec(cpu=cpu, memory="64MB"),
                priority=priority,
                **spec,
            ),
            user="story",
        )

    def step(self, rounds: int = 1, *, seconds: float = 0.5) -> None:
        """Full rounds, the clock moving ``seconds`` before each."""
        for _ in range(rounds):
            self.clock.advance(seconds)
            self.controller.run_round(full=True)

    # ---- reading

    def job_state(self, job_id: str) -> JobState:
        with self.controller.db.read() as cur:
            row = store.get_job(cur, job_id)
        if row is None:
            raise KeyError(job_id)
        return row.state

    def job_error(self, job_id: str) -> str | None:
        with self.controller.db.read() as cur:
            row = store.get_job(cur, job_id)
        return row.error if row is not None else None

    def tasks(self, job_id: str) -> list[TaskView]:
        with self.controller.db.read() as cur:
            rows = store.tasks_of_job(cur, job_id)
            attempts = store.attempts_of_tasks(cur, [r.task_id for r in rows])
        return [
            TaskView(
                task_id=r.task_id,
                state=r.state,
                attempts=tuple((a.attempt_uid, a.state, a.worker_id) for a in attempts[r.task_id]),
                error=r.error,
            )
            for r in rows
        ]

    def task(self, job_id: str, index: int = 0) -> TaskView:
        return self.tasks(job_id)[index]

    def task_states(self, job_id: str) -> list[TaskState]:
        return [t.state for t in self.tasks(job_id)]

    def current_uid(self, job_id: str, index: int = 0) -> str:
        attempts = self.task(job_id, index).attempts
        if not attempts:
            raise LookupError(f"task {index} of {job_id} has no attempt")
        return attempts[-1][0]

    def events(self, job_id: str) -> Sequence[str]:
        with self.controller.db.read() as cur:
            return [e.kind for e in reversed(store.job_events(cur, job_id))]
