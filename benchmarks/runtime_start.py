"""The worker runtime alone, in process: CPU the runtime itself spends to start and finish an attempt.

Starts N `true` attempts through ``SubprocessRuntime.start_many`` in batches (as a reconcile
hands them over), with a ``UsageSampler`` beside it as the worker daemon runs one, and waits until
every attempt is finished and its process released. Reports per attempt: the process's own user
and system CPU (``getrusage(RUSAGE_SELF)``: the runtime's threads and the sampler) and, apart, the
tasks' CPU (``RUSAGE_CHILDREN``: the exec of `true` itself).

    uv run python benchmarks/runtime_start.py [--attempts 1000] [--batch 160] [--runs 5]

Judge it by CPU per attempt, not attempts/s: on a shared machine the wall clock mostly measures
the neighbours. The state dir is made where ``tempfile`` makes it (as the local cluster's is).
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import tempfile
import time
from collections import deque
from pathlib import Path

from report import Report, add_common_args, at_most

from iris.cluster.runtime import SubprocessRuntime
from iris.cluster.worker.usage import UsageSampler
from iris.rpc.enums import TaskState
from iris.rpc.models import Entrypoint, ResourceSpec, RunSpec


def spec(uid: str, index: int) -> RunSpec:
    return RunSpec(
        attempt_uid=uid,
        attempt_number=0,
        job_id="/bench/true",
        task_id=f"/bench/true/{index}",
        task_index=index,
        entrypoint=Entrypoint.from_command("true"),
        resources=ResourceSpec(cpu=0.1, memory="16MB"),
    )


def cpu_now() -> tuple[float, float, float, float]:
    """(own user, own system, children's user, children's system) CPU seconds so far."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime, own.ru_stime, children.ru_utime, children.ru_stime


def run(attempts: int, batch: int, state_dir: Path, keep_finished: int) -> dict[str, float]:
    runtime = SubprocessRuntime(
        state_dir, worker_id="bench", controller_url="http://127.0.0.1:1", keep_finished=keep_finished
    )
    sampler = UsageSampler(runtime.live_processes)
    sampler.start()
    try:
        specs = [spec(f"r{i:06d}", i) for i in range(attempts)]
        uids = [s.attempt_uid for s in specs]
        before = cpu_now()
        began = time.perf_counter()
        for i in range(0, attempts, batch):
            runtime.start_many(specs[i : i + batch])

        # Polled, not checked at every state change: the check must not cost the runtime's CPU.
        waiting = deque(uids)  # attempts end roughly in the order they started
        deadline = time.monotonic() + 300
        while waiting:
            snap = runtime.snapshot(waiting[0])
            if snap is None or snap.runtime_released:  # None: released, then dropped by retention
                waiting.popleft()
                continue
            if time.monotonic() > deadline:
                raise SystemExit("attempts did not finish in 300 s")
            time.sleep(0.02)
        elapsed = time.perf_counter() - began
        after = cpu_now()
        snaps = [runtime.snapshot(uid) for uid in uids]
        failed = sum(1 for snap in snaps if snap is not None and snap.state is not TaskState.SUCCEEDED)
    finally:
        sampler.stop()
        runtime.shutdown()
    used = [(a - b) * 1000 / attempts for a, b in zip(after, before, strict=True)]
    return {
        "attempts_per_s": round(attempts / elapsed, 1),
        "user_ms": round(used[0], 3),
        "sys_ms": round(used[1], 3),
        "cpu_ms": round(used[0] + used[1], 3),
        "tasks_cpu_ms": round(used[2] + used[3], 3),
        "failed": failed,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_common_args(parser, runs=5)
    parser.add_argument("--attempts", type=int, default=1000)
    parser.add_argument("--batch", type=int, default=160, help="attempts per start_many call")
    parser.add_argument("--state-base", help="where to make the state dir (default: tempfile's)")
    parser.add_argument(
        "--keep-finished",
        type=int,
        default=2000,
        help="finished attempts the runtime keeps (its default); fewer than --attempts puts it at its "
        "retention limit, as a long-running worker is: every start then also prunes an old attempt",
    )
    args = parser.parse_args()
    if args.tiny:
        args.attempts, args.batch, args.runs = 40, 20, 1
    report = Report(
        "runtime_start",
        args,
        {
            "attempts": args.attempts,
            "batch": args.batch,
            "runs": args.runs,
            "keep_finished": args.keep_finished,
            "state": args.state_base or tempfile.gettempdir(),
        },
    )
    results = []
    # Every run's state dir is removed only at the end: deleting thousands of files makes the
    # next creations on ext4 dearer for a while (it skips recently freed inodes), which would
    # charge one run's clean-up to the next.
    base = Path(tempfile.mkdtemp(prefix="iris-runtime-bench-", dir=args.state_base))
    try:
        for k in range(args.runs):
            results.append(run(args.attempts, args.batch, base / f"run{k}", args.keep_finished))
            report.note(json.dumps(results[-1]))
    finally:
        shutil.rmtree(base, ignore_errors=True)
    if any(r["failed"] for r in results):
        raise SystemExit("some attempts failed")
    report.figure(
        f"runtime alone, {args.attempts} true attempts: its CPU per attempt",
        [r["cpu_ms"] for r in results],
        "ms",
        at_most(0.8),  # half the 1.63 ms it cost before the pid journal (2026-12-02, quiet machine)
    )
    report.figure("  user", [r["user_ms"] for r in results], "ms")
    report.figure("  system", [r["sys_ms"] for r in results], "ms")
    report.figure("  the tasks' own CPU per attempt", [r["tasks_cpu_ms"] for r in results], "ms")
    report.figure(
        "  attempts/s (wall clock: shared machine)", [r["attempts_per_s"] for r in results], "attempts/s"
    )


if __name__ == "__main__":
    main()
