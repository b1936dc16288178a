"""Simulated worker daemons: many workers on one asyncio loop (benchmarks), or in memory (tests).

Each simulated worker listens on its own loopback port and answers the real Reconcile RPC the
way an idle, infinitely fast machine would: every attempt it is asked to run succeeds at once
(its process "ran" and is released), and stops are acknowledged as released. Only the worker
side is simulated; the controller under test is the real one.

Run the fleet in its own process (``SimulatedFleetProcess``, or ``python -m
iris.testing.simulated_workers``) when measuring: in the controller's process it would compete
for the GIL with the controller's own threads, as real workers never do.

``InMemoryFleet`` is the same idea without sockets, as a controller ``TaskBackend``: attempts it
is asked to run start RUNNING and stay so until a test finishes, fails or loses them (or, with
``instant=True``, succeed at once as the networked fleet's do); it records every desired set.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import uvloop

from iris.cluster.types import AttemptRef, DesiredGroup, GroupReport
from iris.rpc.enums import TaskState
from iris.rpc.errors import NotFound, NotImplementedForBackend
from iris.rpc.models import (
    AttemptObservation,
    DesiredAttempt,
    ExecRequest,
    ExecResponse,
    LogsResponse,
    RunSpec,
    WorkerHealth,
)


def instant_observation(attempt_uid: str, intent: str) -> dict[str, object]:
    """What an idle, infinitely fast worker answers: runs succeed at once, stops are released."""
    if intent == "run":
        return {"attempt_uid": attempt_uid, "state": "SUCCEEDED", "exit_code": 0, "runtime_released": True}
    return {"attempt_uid": attempt_uid, "state": "KILLED", "runtime_released": True}


@dataclass
class SimulatedFleet:
    """``task_seconds`` > 0: a run reports RUNNING that long after the worker first got it, then
    SUCCEEDED. ``record``: keep (time, worker, attempt, intent, task) of every desired entry received
    (task only with a spec), served as JSON at ``GET /sim/log`` on any worker's port."""

    count: int
    host: str = "127.0.0.1"
    task_seconds: float = 0.0
    record: bool = False
    ports: list[int] = field(default_factory=list)
    reconciles: int = 0
    started: dict[str, float] = field(default_factory=dict)
    log: list[tuple[float, str, str, str, str | None]] = field(default_factory=list)
    _loop: asyncio.AbstractEventLoop | None = None
    _thread: threading.Thread | None = None
    _servers: list[asyncio.AbstractServer] = field(default_factory=list)

    def worker_id(self, index: int) -> str:
        return f"sim-{index}"

    def address(self, index: int) -> str:
        return f"{self.host}:{self.ports[index]}"

    def start(self) -> SimulatedFleet:
        ready = threading.Event()

        def run() -> None:
            # uvloop, as the real daemons' uvicorn: asyncio's own transports allocate a 256 KiB
            # buffer per read, which glibc serves by mmap/munmap in some processes and not in
            # others (its threshold moves with what the process freed earlier), so the fleet's
            # cost per answer changed by half from one run to the next.
            self._loop = uvloop.new_event_loop()
            self._loop.run_until_complete(self._serve_all())
            ready.set()
            self._loop.run_forever()

        self._thread = threading.Thread(target=run, name="simulated-workers", daemon=True)
        self._thread.start()
        ready.wait(60)
        return self

    async def _serve_all(self) -> None:
        for index in range(self.count):
            server = await asyncio.start_server(
                self._handler(self.worker_id(index)), self.host, 0, backlog=64
            )
            self._servers.append(server)
            self.ports.append(server.sockets[0].getsockname()[1])

    def _handler(self, worker_id: str):  # noqa: ANN202 - an asyncio connection callback
        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            try:
                while True:
                    head = await reader.readuntil(b"\r\n\r\n")
                    length = 0
                    for line in head.split(b"\r\n"):
                        if line.lower().startswith(b"content-length:"):
                            length = int(line.split(b":", 1)[1])
                    body = await reader.readexactly(length) if length else b""
                    if head.startswith(b"POST /reconcile"):
                        payload = self._reconcile(worker_id, body)
                    elif head.startswith(b"GET /sim/log"):
                        payload = json.dumps(self.log).encode()
                    else:
                        payload = b'{"ok": true}'
                    writer.write(
                        b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: "
                        + str(len(payload)).encode()
                        + b"\r\n\r\n"
                        + payload
                    )
                    await writer.drain()
            except (asyncio.IncompleteReadError, ConnectionError):
                pass
            finally:
                writer.close()

        return handle

    def _reconcile(self, worker_id: str, body: bytes) -> bytes:
        self.reconciles += 1
        now = time.time()
        observations = []
        for d in json.loads(body)["attempts"]:
            uid, intent = d["attempt_uid"], d["intent"]
            first = intent == "run" and uid not in self.started
            if first:
                self.started[uid] = now
            if self.record:
                self.log.append((now, worker_id, uid, intent, (d.get("spec") or {}).get("task_id")))
            if intent == "run" and now - self.started[uid] < self.task_seconds:
                observations.append({"attempt_uid": uid, "state": "RUNNING", "started_at": self.started[uid]})
            else:
                observations.append(instant_observation(uid, intent))
        return json.dumps(
            {"worker_id": worker_id, "observations": observations, "health": {"healthy": True}}
        ).encode()

    def stop(self) -> None:
        if self._loop is None:
            return
        for server in self._servers:
            self._loop.call_soon_threadsafe(server.close)
        self._loop.call_soon_threadsafe(self._loop.stop)
        if self._thread is not None:
            self._thread.join(timeout=10)


class SimulatedFleetProcess:
    """The same fleet in a child process; ``address(i)`` and ``worker_id(i)`` as on ``SimulatedFleet``."""

    def __init__(self, count: int, *, task_seconds: float = 0.0, record: bool = False) -> None:
        self.count = count
        self.task_seconds = task_seconds
        self.record = record
        self.ports: list[int] = []
        self._proc: subprocess.Popen[str] | None = None

    def worker_id(self, index: int) -> str:
        return f"sim-{index}"

    def address(self, index: int) -> str:
        return f"127.0.0.1:{self.ports[index]}"

    def start(self) -> SimulatedFleetProcess:
        self._proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "iris.testing.simulated_workers",
                "--count",
                str(self.count),
                "--task-seconds",
                str(self.task_seconds),
                *(["--record"] if self.record else []),
            ],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self._proc.stdout is not None
        self.ports = json.loads(self._proc.stdout.readline())["ports"]
        return self

    def stop(self) -> None:
        if self._proc is not None:
            self._proc.send_signal(signal.SIGTERM)
            self._proc.wait(timeout=30)


@dataclass
class SimAttempt:
    """One attempt on the in-memory fleet; ``report`` is what the fleet answers about it."""

    uid: str
    worker_id: str | None
    task_id: str
    report: AttemptObservation

    @property
    def state(self) -> TaskState:
        return self.report.state

    def become(self, **fields: object) -> None:
        self.report = self.report.model_copy(update=fields)


@dataclass(frozen=True)
class Sent:
    """One desired entry the fleet received: which worker (None on a cluster-wide group), what."""

    worker_id: str | None
    attempt_uid: str
    intent: str
    task_id: str | None
    spec: RunSpec | None = None


class InMemoryFleet:
    """A ``TaskBackend`` with workers in memory; see the module docstring."""

    def __init__(self, *, instant: bool = False) -> None:
        self.instant = instant
        self.attempts: dict[str, SimAttempt] = {}
        self.sent: list[Sent] = []
        self.unreachable: set[str] = set()
        self.released_on_stop = True

    # ---- what a test does to the attempts

    def live(self, task_id: str | None = None) -> list[SimAttempt]:
        return [
            a
            for a in self.attempts.values()
            if a.state is TaskState.RUNNING and (task_id is None or a.task_id == task_id)
        ]

    def finish(self, uid: str, exit_code: int = 0, error: str | None = None) -> None:
        state = TaskState.SUCCEEDED if exit_code == 0 else TaskState.FAILED
        self.attempts[uid].become(state=state, exit_code=exit_code, error=error, runtime_released=True)

    def lose(self, uid: str) -> None:
        """The attempt's process vanished without being asked (infrastructure loss)."""
        self.attempts.pop(uid)

    def runs_sent(self, task_id: str | None = None) -> list[Sent]:
        return [s for s in self.sent if s.intent == "run" and (task_id is None or s.task_id == task_id)]

    # ---- the TaskBackend protocol

    def converge(self, groups: Sequence[DesiredGroup]) -> list[GroupReport]:
        reports = []
        for group in groups:
            if group.worker_id in self.unreachable:
                reports.append(GroupReport(group.worker_id, None, error="unreachable (simulated)"))
                continue
            observations = [self._apply(group.worker_id, d) for d in group.attempts]
            reports.append(
                GroupReport(group.worker_id, tuple(observations), health=WorkerHealth(healthy=True))
            )
        return reports

    def _apply(self, worker_id: str | None, desired: DesiredAttempt) -> AttemptObservation:
        uid = desired.attempt_uid
        task_id = desired.spec.task_id if desired.spec is not None else None
        self.sent.append(Sent(worker_id, uid, desired.intent, task_id, desired.spec))
        if self.instant:
            return AttemptObservation.model_validate(instant_observation(uid, desired.intent))
        attempt = self.attempts.get(uid)
        if desired.intent == "stop":
            if attempt is None:
                return AttemptObservation(attempt_uid=uid, state=TaskState.MISSING, runtime_released=True)
            if attempt.state is TaskState.RUNNING:
                attempt.become(state=TaskState.KILLED, error="stopped by the controller")
            attempt.become(runtime_released=attempt.report.runtime_released or self.released_on_stop)
        elif attempt is None:
            if desired.spec is None:
                return AttemptObservation(attempt_uid=uid, state=TaskState.MISSING, runtime_released=True)
            running = AttemptObservation(attempt_uid=uid, state=TaskState.RUNNING)
            attempt = self.attempts[uid] = SimAttempt(uid, worker_id, desired.spec.task_id, running)
        return attempt.report

    def attempt_logs(self, ref: AttemptRef, *, offset: int, limit: int) -> LogsResponse:
        if ref.attempt_uid not in self.attempts:
            raise NotFound(f"attempt {ref.attempt_uid} is not in the simulated fleet")
        return LogsResponse(
            lines=[], next_offset=offset, complete=self.attempts[ref.attempt_uid].report.runtime_released
        )

    def attempt_exec(self, ref: AttemptRef, request: ExecRequest) -> ExecResponse:
        return ExecResponse(exit_code=0, stdout=" ".join(request.argv))

    def attempt_status(self, ref: AttemptRef) -> dict[str, Any]:
        attempt = self.attempts.get(ref.attempt_uid)
        if attempt is None:
            raise NotFound(f"attempt {ref.attempt_uid} is not in the simulated fleet")
        return {"kind": "process", "state": attempt.state.value, "processes": []}

    def overview(self) -> dict[str, Any]:
        raise NotImplementedForBackend("the simulated fleet has no cluster view")

    def watch(self, on_change: Callable[[], None]) -> None:
        """Nothing changes on its own here."""

    def set_controller_url(self, url: str) -> None:
        """Simulated attempts never call back."""

    def close(self) -> None:
        """Kept across controllers: a restarted controller finds the same attempts."""


def main() -> None:
    parser = argparse.ArgumentParser(description="Serve N simulated workers; prints their ports as JSON.")
    parser.add_argument("--count", type=int, required=True)
    parser.add_argument("--task-seconds", type=float, default=0.0, help="how long each run reports RUNNING")
    parser.add_argument("--record", action="store_true", help="log first runs and stops (GET /sim/log)")
    args = parser.parse_args()
    fleet = SimulatedFleet(args.count, task_seconds=args.task_seconds, record=args.record).start()
    print(json.dumps({"ports": fleet.ports}), flush=True)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    stop.wait()


if __name__ == "__main__":
    main()
