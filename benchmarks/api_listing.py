"""The read API with many jobs stored: `iris job list`, job status and the dashboard's jobs page.

Stores N jobs (a few pending, most finished, 7 users) and one job with M tasks straight into a
controller database, starts a real controller process over it (no workers) and times, over real
HTTP, the requests those views make. Target: p99 <= 20 ms per page; the big job's status answers
with a page of its tasks, not all of them.

    uv run python benchmarks/api_listing.py [--jobs 100000] [--big-job-tasks 100000] [--runs 3]
"""

from __future__ import annotations

import argparse
import random
import sqlite3
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import httpx
from report import Report, add_common_args, at_most, percentile

from iris.client import LocalCluster
from iris.cluster.controller import store
from iris.cluster.controller.db import ControllerDB
from iris.cluster.controller.effects import Change, Effects, InsertJob
from iris.rpc.models import Entrypoint, JobSpec, ResourceSpec

USERS = [f"user{i}" for i in range(7)]


def insert_job(cur: sqlite3.Cursor, job_id: str, spec: JobSpec, user: str, now: float) -> None:
    """Store a job the way a submission does: one InsertJob change through the guarded commit."""
    job = InsertJob(
        job_id=job_id,
        spec=spec,
        user=user,
        parent_job_id=None,
        root_job_id=job_id,
        depth=1,
        root_submitted_at=now,
    )
    store.commit(cur, Effects(changes=(Change(writes=(job,)),)), now)


def populate(state_dir: Path, jobs: int, big_tasks: int, pending: int) -> None:
    db = ControllerDB(state_dir / "controller.sqlite3")
    now = time.time() - jobs
    with db.transaction() as cur:
        for i in range(jobs):
            user = USERS[i % len(USERS)]
            spec = JobSpec(
                name=f"bulk-{i:06d}",
                entrypoint=Entrypoint.from_command("true"),
                resources=ResourceSpec(cpu="0.1", memory="16MB"),
                user=user,
            )
            job_id = f"/{user}/bulk-{i:06d}"
            insert_job(cur, job_id, spec, user, now + i)
        big = JobSpec(
            name="big",
            entrypoint=Entrypoint.from_command("true"),
            replicas=big_tasks,
            resources=ResourceSpec(cpu="0.1", memory="16MB"),
            user="user0",
        )
        insert_job(cur, "/user0/big", big, "user0", now)
        finished = "job_id NOT IN (SELECT job_id FROM jobs ORDER BY submitted_at DESC LIMIT ?)"
        cur.execute(
            f"UPDATE jobs SET state = 'SUCCEEDED', finished_at = submitted_at + 1 WHERE {finished}",
            (pending,),
        )
        cur.execute(
            f"UPDATE tasks SET state = 'SUCCEEDED', finished_at = 1 WHERE job_id IN (SELECT job_id FROM jobs WHERE {finished})",
            (pending,),
        )
    db.close()


def timed_get(http: httpx.Client, path: str, params: dict[str, object] | None = None) -> tuple[float, int]:
    t0 = time.perf_counter()
    answer = http.get(path, params=params)
    elapsed = (time.perf_counter() - t0) * 1000
    answer.raise_for_status()
    return elapsed, len(answer.content)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add_common_args(parser)
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--big-job-tasks", type=int, default=100_000)
    parser.add_argument("--pending", type=int, default=100, help="stored jobs still pending")
    parser.add_argument("--requests", type=int, default=100, help="requests per figure per run")
    args = parser.parse_args()
    if args.tiny:
        args.jobs, args.big_job_tasks, args.pending, args.requests, args.runs = 500, 500, 10, 5, 1
    report = Report(
        "api_listing",
        args,
        {
            "jobs": args.jobs,
            "big_job_tasks": args.big_job_tasks,
            "requests": args.requests,
            "runs": args.runs,
        },
    )
    rng = random.Random(3)
    with tempfile.TemporaryDirectory(prefix="iris-bench-") as tmp:
        state = Path(tmp)
        (state / "controller").mkdir()
        t0 = time.perf_counter()
        populate(state / "controller", args.jobs, args.big_job_tasks, args.pending)
        report.note(f"stored {args.jobs + 1} jobs in {time.perf_counter() - t0:.1f}s")
        with (
            LocalCluster(workers=0, state_dir=state) as cluster,
            httpx.Client(base_url=cluster.url, timeout=120) as http,
        ):
            cases: dict[str, Callable[[], tuple[str, dict[str, object] | None]]] = {
                "iris job list (first 100)": lambda: ("/api/v1/jobs", {"limit": 100}),
                "job list, a deep page (offset N/2)": lambda: (
                    "/api/v1/jobs",
                    {"limit": 100, "offset": args.jobs // 2},
                ),
                "job list of one user, pending and running": lambda: (
                    "/api/v1/jobs",
                    {"user": rng.choice(USERS), "state": "PENDING,RUNNING", "limit": 100},
                ),
                "dashboard jobs page (roots, 50 a page, newest first)": lambda: (
                    "/api/v1/jobs",
                    {"roots": "true", "limit": 50, "offset": 50 * rng.randrange(20), "sort": "submitted_at"},
                ),
                "dashboard jobs page: cluster counts": lambda: ("/api/v1/cluster", None),
                "job status of one job": lambda: (
                    f"/api/v1/jobs/{USERS[0]}/bulk-{7 * rng.randrange(args.jobs // 7):06d}",
                    None,
                ),
            }
            for name, make in cases.items():
                timed_get(http, *make())  # warm up
                p99s = []
                for _ in range(args.runs):
                    times = [timed_get(http, *make())[0] for _ in range(args.requests)]
                    p99s.append(percentile(times, 0.99))
                report.figure(f"{name}, {args.jobs} jobs stored, p99", p99s, "ms", at_most(20))
            p99s, sizes = [], []
            for _ in range(args.runs):
                samples = [
                    timed_get(http, "/api/v1/jobs/user0/big") for _ in range(max(3, args.requests // 10))
                ]
                p99s.append(percentile([s[0] for s in samples], 0.99))
                sizes.append(samples[0][1] / 1e6)
            report.figure(f"status of a job with {args.big_job_tasks} tasks, p99", p99s, "ms", at_most(20))
            report.figure("  its answer's size", sizes, "MB", at_most(1))


if __name__ == "__main__":
    main()
