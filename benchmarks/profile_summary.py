"""Where the time goes: summarise a py-spy raw profile per process (controller, workers, driver).

Record any benchmark with its subprocesses, then summarise:

    uv tool run py-spy record --subprocesses --rate 100 --format raw -o /tmp/p.raw -- \\
        .venv/bin/python benchmarks/local_throughput.py --cases tasks --runs 1
    uv run python benchmarks/profile_summary.py /tmp/p.raw [--top 25] [--match iris/]

For each process: its busy samples (threads waiting in a lock, a queue or a socket are left
out), the functions with the most samples on the stack (inclusive) and at its top (self), with
their share of that process's busy samples.
"""

from __future__ import annotations

import argparse
import re
from collections import Counter
from pathlib import Path

PROCESS = re.compile(r'process \d+:"([^"]*)"')
THREAD = re.compile(r"thread \(\d+\): ")
# Leaf frames that mean a thread is waiting, not working: left out of the shares.
IDLE = {
    "Condition.wait (threading.py)",
    "Event.wait (threading.py)",
    "EpollSelector.select (selectors.py)",
    "_worker (concurrent/futures/thread.py)",
    "Queue.get (queue.py)",
    "SocketIO.readinto (socket.py)",
    "select (selectors.py)",
    "Thread._wait_for_tstate_lock (threading.py)",
}


def role(command: str) -> str:
    if "simulated_workers" in command:
        return "simulated workers"
    if "iris.cluster.controller" in command or command == "controller":
        return "controller"
    if "iris.cluster.worker" in command or command.startswith("worker-"):
        return "worker daemons"
    return "driver: " + command.split(" ", 2)[1] if " " in command else command


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("raw", type=Path)
    parser.add_argument("--top", type=int, default=20)
    parser.add_argument("--match", default="", help="only list frames whose text contains this")
    args = parser.parse_args()
    totals: Counter[str] = Counter()
    idle: Counter[str] = Counter()
    inclusive: dict[str, Counter[str]] = {}
    self_time: dict[str, Counter[str]] = {}
    for line in args.raw.read_text(errors="replace").splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not count_text.isdigit():
            continue
        count = int(count_text)
        frames = stack.split(";")
        processes = [PROCESS.match(f) for f in frames]
        owner = [m.group(1) for m in processes if m]
        who = role(owner[-1]) if owner else "?"
        frames = [f for f, m in zip(frames, processes, strict=True) if not m and not THREAD.match(f)]
        frames = [re.sub(r":\d+\)$", ")", f) for f in frames]
        if frames and frames[-1] in IDLE:
            idle[who] += count
            continue
        totals[who] += count
        inc = inclusive.setdefault(who, Counter())
        for name in set(frames):
            inc[name] += count
        if frames:
            self_time.setdefault(who, Counter())[frames[-1]] += count
    for who, total in totals.most_common():
        print(f"\n## {who}: {total} busy samples ({idle[who]} idle left out)")
        print("inclusive:")
        shown = [(name, n) for name, n in inclusive[who].most_common() if args.match in name]
        for name, n in shown[: args.top]:
            print(f"  {n / total:6.1%}  {name}")
        print("self:")
        for name, n in self_time.get(who, Counter()).most_common(args.top):
            print(f"  {n / total:6.1%}  {name}")


if __name__ == "__main__":
    main()
