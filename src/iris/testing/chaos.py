"""Chaos over a real local cluster: a seeded mix of faults while a batch of tasks runs.

Every task's command stamps its own attempt file in a shared directory (start, a beat every
``BEAT_S``, stop; wall-clock seconds from bash's ``$EPOCHREALTIME``). At the end the stamps say
whether two attempts of one task were ever alive at once (double-active), and the controller's
attempts and events say whether any task was lost or reopened.

Faults (``FAULTS``):
- ``worker_kill``: ``kill -9`` of a worker daemon, restarted after a short pause with its id and
  state dir. Its watchdog kills its process attempts at once (their output pipes died with the
  daemon: they cannot be adopted; the controller retries them); container attempts run on in the
  engine and the restarted daemon adopts them (docs/containers.md). The chaos tasks are processes.
- ``worker_stop``: ``SIGSTOP`` of a worker daemon for longer than the controller's grace, then
  ``SIGCONT`` (a hung daemon; also how a partition looks from both ends).
- ``controller_kill``: ``kill -9`` of the controller, restarted at once on the same state dir.
- ``partition`` (run as root, where network namespaces can be made): each worker lives in a
  network namespace of its own, joined to the controller's by a veth pair; the fault cuts one
  worker's link (both directions) for longer than the grace, then restores it.
"""

from __future__ import annotations

import os
import random
import secrets
import signal
import threading
import time
from collections import Counter
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

import httpx

from iris.client import Entrypoint, IrisClient, JobState, LocalCluster, ResourceSpec, TaskState
from iris.cluster.types import TERMINAL_JOB_STATES
from iris.rpc.errors import IrisError
from iris.testing.netns import NetnsLink, netns_available

FAULTS = ("worker_kill", "worker_stop", "controller_kill")
NETWORK_FAULTS = ("partition",)
BEAT_S = 0.2
# Final task states (a worker failure or preemption is retried, so it ends nothing).
TERMINAL_KINDS = ("task_succeeded", "task_failed", "task_killed")
T = TypeVar("T")


@dataclass(frozen=True)
class Overlap:
    task_id: str
    attempts: tuple[str, str]
    seconds: float
    start: float
    fault: str  # the last fault injected before the overlap began


@dataclass
class ChaosReport:
    tasks: int
    seed: int
    elapsed_s: float = 0.0
    faults: Counter[str] = field(default_factory=Counter)
    lost: list[str] = field(default_factory=list)
    duplicated: list[str] = field(default_factory=list)  # tasks whose command ran to its end twice
    reopened: list[str] = field(default_factory=list)
    overlaps: list[Overlap] = field(default_factory=list)
    recovery_s: list[float] = field(default_factory=list)  # controller kill -> next attempt start
    # The HTTP status of a call without a token, when the controller listened beyond loopback.
    open_call_status: int | None = None

    def row(self, experiment: str) -> dict[str, str]:
        faults = ", ".join(f"{n} {k}" for k, n in sorted(self.faults.items())) or "none"
        worst = max((o.seconds for o in self.overlaps), default=0.0)
        rec = sorted(self.recovery_s)
        recovery = f"{rec[0]:.1f}-{rec[-1]:.1f} s" if rec else "-"
        return {
            "experiment": experiment,
            "load": f"{self.tasks} tasks, {self.elapsed_s:.0f} s",
            "faults": faults,
            "lost": str(len(self.lost)),
            "duplicated": str(len(self.duplicated)),
            "reopened": str(len(self.reopened)),
            "double-active": f"{len(self.overlaps)} (max {worst:.1f} s)" if self.overlaps else "0",
            "recovery": recovery,
        }


def task_command(stamps: Path, beats: int) -> Entrypoint:
    script = (
        f'f={stamps}/"$IRIS_ATTEMPT_UID"; echo "start $IRIS_TASK_ID $EPOCHREALTIME" >> "$f"; '
        f'for i in $(seq {beats}); do sleep {BEAT_S}; echo "beat $EPOCHREALTIME" >> "$f"; done; '
        'echo "stop $EPOCHREALTIME" >> "$f"'
    )
    return Entrypoint.from_command("bash", "-c", script)


@dataclass
class _Run:
    task_id: str
    start: float
    last: float
    completed: bool


def read_stamps(stamps: Path) -> dict[str, _Run]:
    runs: dict[str, _Run] = {}
    for path in stamps.iterdir():
        lines = path.read_text().split("\n")
        first = lines[0].split()
        if len(first) != 3 or first[0] != "start":
            continue
        times = [float(line.split()[-1]) for line in lines if line.strip() and _ends_in_number(line)]
        runs[path.name] = _Run(first[1], times[0], times[-1], any(x.startswith("stop ") for x in lines))
    return runs


def _ends_in_number(line: str) -> bool:
    try:
        float(line.split()[-1])
    except ValueError:
        return False  # a line cut short by a kill
    return True


def find_overlaps(runs: dict[str, _Run], fault_log: list[tuple[float, str]]) -> list[Overlap]:
    by_task: dict[str, list[tuple[str, _Run]]] = {}
    for uid, run in runs.items():
        by_task.setdefault(run.task_id, []).append((uid, run))
    overlaps = []
    for task_id, attempts in by_task.items():
        attempts.sort(key=lambda a: a[1].start)
        for i, (uid_a, a) in enumerate(attempts):
            for uid_b, b in attempts[i + 1 :]:
                seconds = min(a.last, b.last) - max(a.start, b.start)
                if seconds > 0:
                    begin = max(a.start, b.start)
                    before = [name for t, name in fault_log if t <= begin]
                    fault = before[-1] if before else "none"
                    overlaps.append(Overlap(task_id, (uid_a, uid_b), seconds, begin, fault))
    return overlaps


class _Injector(threading.Thread):
    def __init__(
        self,
        cluster: LocalCluster,
        rng: random.Random,
        every_s: tuple[float, float],
        stop_s: float,
        links: list[NetnsLink],
    ) -> None:
        super().__init__(daemon=True, name="chaos")
        self.cluster = cluster
        self.links = links
        self.faults = FAULTS + (NETWORK_FAULTS if links else ())
        self.rng = rng
        self.every_s = every_s
        self.stop_s = stop_s
        self.done = threading.Event()
        self.log: list[tuple[float, str]] = []
        self.controller_kills: list[float] = []
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            while not self.done.wait(self.rng.uniform(*self.every_s)):
                self.inject(self.rng.choice(self.faults))
        except BaseException as exc:  # reported by the caller
            self.error = exc

    def inject(self, fault: str) -> None:
        self.log.append((time.time(), fault))
        if fault == "controller_kill":
            ctl = self.cluster.controller
            if ctl is not None:
                ctl.proc.send_signal(signal.SIGKILL)
                ctl.proc.wait()
            self.controller_kills.append(time.time())
            self.cluster.restart_controller()
            return
        if fault == "partition":
            link = self.rng.choice(self.links)
            link.partition()
            try:
                time.sleep(self.stop_s)
            finally:
                link.heal()
            return
        victim = self.rng.choice(self.cluster.workers)
        if fault == "worker_kill":
            victim.proc.send_signal(signal.SIGKILL)
            victim.proc.wait()
            time.sleep(self.rng.uniform(0.5, 2.0))
            self.cluster.restart_worker(victim.name, wait=False)
        else:
            os.kill(victim.proc.pid, signal.SIGSTOP)
            try:
                time.sleep(self.stop_s)
            finally:
                os.kill(victim.proc.pid, signal.SIGCONT)


def run_chaos(
    state_dir: Path,
    *,
    tasks: int,
    seed: int,
    beats: tuple[int, int] = (2, 25),
    per_job: int = 10,
    fault_every_s: tuple[float, float] = (2.0, 5.0),
    worker_grace_s: float = 3.0,
    timeout_s: float = 600.0,
    worker_cpu: str = "4",
    partitions: bool | None = None,
) -> ChaosReport:
    """Run ``tasks`` tasks (jobs of ``per_job`` replicas, each job's tasks ``beats`` x ``BEAT_S``
    long, drawn per job) under faults; return what was measured. Tasks longer than the grace are
    the ones a hung worker can run twice at once. ``partitions`` (default: where the machine
    allows it) puts each worker behind a network link of its own and adds partition faults."""
    with ExitStack() as stack:
        links: list[NetnsLink] = []
        if netns_available() if partitions is None else partitions:
            tag = os.getpid() % 1000
            for i in range(3):
                links.append(
                    stack.enter_context(NetnsLink(f"irc{tag}-{i}", subnet=100 + (tag * 3 + i) % 150))
                )
        return _run(
            state_dir,
            tasks,
            seed,
            beats,
            per_job,
            fault_every_s,
            worker_grace_s,
            timeout_s,
            worker_cpu,
            links,
        )


def _run(
    state_dir: Path,
    tasks: int,
    seed: int,
    beats: tuple[int, int],
    per_job: int,
    fault_every_s: tuple[float, float],
    worker_grace_s: float,
    timeout_s: float,
    worker_cpu: str,
    links: list[NetnsLink],
) -> ChaosReport:
    report = ChaosReport(tasks=tasks, seed=seed)
    stamps = state_dir / "stamps"
    stamps.mkdir(parents=True)
    os.chmod(stamps, 0o1777)  # attempts may run as uids of their own
    rng = random.Random(seed)
    started = time.monotonic()
    # Workers behind links reach the controller on their link's address, so it listens on every
    # address: then it takes callers by token only, like any controller off loopback.
    admin, worker = (secrets.token_hex(16), secrets.token_hex(16)) if links else (None, None)
    controller_args: list[str] = []
    if links:
        config = state_dir / "cluster.yaml"
        config.write_text(
            "auth:\n  tokens:\n"
            f"    - {{token: {admin}, role: admin}}\n"
            f"    - {{token: {worker}, role: worker}}\n"
        )
        controller_args = ["--config", str(config)]
    with LocalCluster(
        workers=0 if links else 3,
        host="0.0.0.0" if links else "127.0.0.1",
        state_dir=state_dir / "cluster",
        worker_cpu=worker_cpu,
        worker_memory="8GB",
        worker_grace_s=worker_grace_s,
        tick_s=0.5,
        controller_args=controller_args,
        token=admin,
        worker_token=worker,
    ) as cluster:
        for i, link in enumerate(links):
            cluster.add_worker(
                i, wait=False, host=link.ns_ip, launcher=link.exec_prefix, controller_host=link.host_ip
            )
        cluster.wait_for_workers(3)
        if links:
            report.open_call_status = httpx.get(f"{cluster.url}/api/v1/jobs", timeout=10).status_code
        client = IrisClient(cluster.url, token=admin)
        specs = [
            client.build_spec(
                task_command(stamps, rng.randint(*beats)),
                name=f"chaos-{seed}-{i}",
                replicas=min(per_job, tasks - i * per_job),
                resources=ResourceSpec(cpu=0.5, memory="32MB"),
                max_retries_preemption=1000,
            )
            for i in range((tasks + per_job - 1) // per_job)
        ]
        jobs = client.submit_many(specs)
        injector = _Injector(cluster, rng, fault_every_s, stop_s=worker_grace_s * 2, links=links)
        injector.start()
        deadline = time.monotonic() + timeout_s
        try:
            pending = list(jobs)
            while pending and time.monotonic() < deadline:
                if injector.error is not None:
                    raise injector.error
                try:
                    pending = [j for j in pending if j.status() not in TERMINAL_JOB_STATES]
                except IrisError:
                    pass  # the controller is restarting
                time.sleep(0.5)
        finally:
            injector.done.set()
            injector.join()
        if injector.error is not None:
            raise injector.error
        report.elapsed_s = time.monotonic() - started
        report.faults = Counter(name for _, name in injector.log)
        runs = read_stamps(stamps)
        for job in jobs:
            detail = _retry(lambda job=job: job.detail())
            for task in detail.tasks:
                succeeded = [a for a in task.attempts if a.state is TaskState.SUCCEEDED]
                if task.state is not TaskState.SUCCEEDED or len(succeeded) != 1:
                    report.lost.append(task.task_id)
                elif task.attempts[-1].state is not TaskState.SUCCEEDED:
                    report.reopened.append(task.task_id)  # an attempt after the one that succeeded
                if (
                    sum(1 for a in task.attempts if a.attempt_uid in runs and runs[a.attempt_uid].completed)
                    > 1
                ):
                    report.duplicated.append(task.task_id)
            if detail.state is not JobState.SUCCEEDED:
                report.lost.extend(t.task_id for t in detail.tasks if t.task_id not in report.lost)
            events = _retry(
                lambda job=job: client.http.request("GET", f"/api/v1/jobs{job.job_id}:events?limit=2000")
            )
            report.reopened.extend(
                t for t in reopened_from_events(events["events"]) if t not in report.reopened
            )
        report.overlaps = find_overlaps(runs, injector.log)
        starts = sorted(r.start for r in runs.values())
        for killed in injector.controller_kills:
            after = next((s for s in starts if s > killed), None)
            if after is not None:
                report.recovery_s.append(after - killed)
    return report


def reopened_from_events(events: list[dict[str, object]]) -> list[str]:
    """Tasks with any event after their terminal one (events come newest first)."""
    ended: set[str] = set()
    reopened: list[str] = []
    for event in reversed(events):
        task_id = event.get("task_id")
        if not isinstance(task_id, str) or not task_id:
            continue
        if task_id in ended and task_id not in reopened:
            reopened.append(task_id)
        if event["kind"] in TERMINAL_KINDS:
            ended.add(task_id)
    return reopened


def _retry(call: Callable[[], T]) -> T:
    """The controller may still be coming back from its last kill."""
    deadline = time.monotonic() + 60
    while True:
        try:
            return call()
        except IrisError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)
