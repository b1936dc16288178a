"""Profile the controller and the worker daemons during a measured run only (not start-up).

Starts a local cluster, warms it up, attaches py-spy (``uv tool run py-spy``) to the controller
and to every worker daemon, runs one case, detaches and prints where each process spent its
samples (``profile_summary.py``).

    uv run python benchmarks/profile_run.py --case tasks     # 1,000 `true` tasks as one job
    uv run python benchmarks/profile_run.py --case jobs      # 1,000 single-task jobs, back to back
    uv run python benchmarks/profile_run.py --case batch     # the same 1,000 jobs in one call

py-spy needs permission to read another process's memory (ptrace; root in a container, or
``kernel.yama.ptrace_scope=0``).
"""

from __future__ import annotations

import argparse
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from local_throughput import TRUE, run_tasks_job, wait_idle

from iris.client import IrisClient, ResourceSpec

HERE = Path(__file__).resolve().parent


def attach(pid: int, out: Path, rate: int, gil: bool = False) -> subprocess.Popen[bytes]:
    argv = ["uv", "tool", "run", "py-spy", "record", "--pid", str(pid), "--rate", str(rate)]
    argv += ["--format", "raw", "--nonblocking", "-o", str(out)]
    if gil:
        argv.append("--gil")
    return subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--case", choices=("tasks", "jobs", "batch"), default="tasks")
    parser.add_argument("--count", type=int, default=1000)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--rate", type=int, default=50, help="samples per second per process")
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--out", type=Path, help="keep the raw profiles in this directory")
    parser.add_argument(
        "--gil",
        action="store_true",
        help="sample only the thread holding the GIL: where each process's Python time goes"
        " (without it, threads waiting for the GIL or a lock count as busy where they wait)",
    )
    args = parser.parse_args()
    res = ResourceSpec(cpu="0.1", memory="16MB")
    out = args.out or Path(tempfile.mkdtemp(prefix="iris-profile-"))
    out.mkdir(parents=True, exist_ok=True)
    with IrisClient.local(workers=args.workers, worker_cpu="16", worker_memory="16GB") as client:
        cluster = client.cluster
        if cluster is None or cluster.controller is None:
            raise SystemExit("needs a local cluster")
        run_tasks_job(client, "warmup", args.workers * 4, res)
        pids = {"controller": cluster.controller.proc.pid}
        pids |= {w.name: w.proc.pid for w in cluster.workers}
        spies = {name: attach(pid, out / f"{name}.raw", args.rate, args.gil) for name, pid in pids.items()}
        time.sleep(2)  # py-spy attaches
        t0 = time.perf_counter()
        if args.case == "tasks":
            run_tasks_job(client, "profiled", args.count, res)
        else:
            specs = [client.build_spec(TRUE, name=f"profiled-{i}", resources=res) for i in range(args.count)]
            if args.case == "jobs":
                for spec in specs:
                    client.submit_spec(spec)
            else:
                client.submit_many(specs)
            wait_idle(client)
        elapsed = time.perf_counter() - t0
        for spy in spies.values():
            spy.send_signal(signal.SIGINT)
        for name, spy in spies.items():
            _, err = spy.communicate(timeout=60)
            if not (out / f"{name}.raw").exists():
                raise SystemExit(f"py-spy wrote nothing for {name}: {err.decode(errors='replace')[-500:]}")
    print(f"{args.case}: {args.count} in {elapsed:.2f}s = {args.count / elapsed:.0f}/s (under py-spy)")
    combined = out / "all.raw"
    with combined.open("w") as merged:
        for name in pids:
            for line in (out / f"{name}.raw").read_text(errors="replace").splitlines():
                merged.write(f'process 0:"{name}";{line}\n')
    subprocess.call([sys.executable, str(HERE / "profile_summary.py"), str(combined), "--top", str(args.top)])
    print(f"raw profiles: {out}")


if __name__ == "__main__":
    main()
