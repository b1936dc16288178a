"""Container task cost: Iris jobs in an image against bare ``docker run`` in the same run.

Cases, all with ``iris-test/busybox:1`` running ``true`` on the test engine
(``scripts/container-engine``; started here if none runs, stopped at the end if started here):
- bare: ``docker run --rm --network host IMAGE true``, ``--parallel`` at a time (the worker's
  concurrency), N times: wall time / N is the bare per-task cost;
- jobs: N one-task jobs submitted at once (``submit_many``), run to the end;
- tasks: one N-task job, run to the end.

Targets: Iris per-task cost <= 1.25x bare (<= 25% overhead) and >= 5 container tasks/s.

    uv run python benchmarks/containers.py [--tasks 200] [--parallel 4]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from iris.client import Entrypoint, IrisClient, ResourceSpec  # noqa: E402
from iris.client.local_cluster import LocalCluster  # noqa: E402
from iris.testing import container_engine as engines  # noqa: E402
from iris.testing.images import BUSYBOX_IMAGE  # noqa: E402

TRUE = Entrypoint.from_command("true")


def bare(count: int, parallel: int, env: dict[str, str]) -> float:
    cli = engines.docker_cli()

    def one(_: int) -> None:
        subprocess.run(
            [cli, "run", "--rm", "--network", "host", BUSYBOX_IMAGE, "true"],
            env=env,
            check=True,
            capture_output=True,
        )

    started = time.monotonic()
    with ThreadPoolExecutor(parallel) as pool:
        list(pool.map(one, range(count)))
    return time.monotonic() - started


def wait_done(client: IrisClient, job_ids: list[str], timeout: float = 1800) -> None:
    deadline = time.monotonic() + timeout
    for job_id in job_ids:
        job = client.job(job_id)
        detail = job.wait(timeout=max(1.0, deadline - time.monotonic()), poll_s=0.05)
        if detail.state.value != "SUCCEEDED":
            raise SystemExit(f"job {job_id} ended {detail.state.value}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=200)
    parser.add_argument("--parallel", type=int, default=4, help="tasks at a time (worker cpu slots)")
    args = parser.parse_args()
    engine = engines.acquire()
    try:
        engines.load_images(engine, (BUSYBOX_IMAGE,))
        env = {**os.environ, **engine.env()}
        os.environ.update(engine.env())
        os.environ["IRIS_CONTAINER_CLI"] = engines.docker_cli()
        bare(4, args.parallel, env)  # warm the engine
        bare_s = bare(args.tasks, args.parallel, env)
        resources = ResourceSpec(cpu=1, memory="128MB")
        with LocalCluster(workers=1, worker_cpu=str(args.parallel), worker_memory="8GB") as cluster:
            with IrisClient(cluster.url) as client:
                warm = client.submit(
                    TRUE, name="warm", image=BUSYBOX_IMAGE, resources=resources, workspace=False
                )
                wait_done(client, [warm.job_id])
                specs = [
                    client.build_spec(TRUE, name=f"c{i}", image=BUSYBOX_IMAGE, resources=resources)
                    for i in range(args.tasks)
                ]
                started = time.monotonic()
                jobs = client.submit_many(specs)
                wait_done(client, [j.job_id for j in jobs])
                jobs_s = time.monotonic() - started
                started = time.monotonic()
                many = client.submit(
                    TRUE,
                    name="many",
                    image=BUSYBOX_IMAGE,
                    resources=resources,
                    replicas=args.tasks,
                    workspace=False,
                )
                wait_done(client, [many.job_id])
                tasks_s = time.monotonic() - started
    finally:
        engines.release(engine)
    n = args.tasks
    bare_ms = bare_s / n * 1000
    print(
        f"bare docker run --rm --network host true: {bare_ms:.0f} ms/task ({n / bare_s:.1f}/s, {args.parallel} at a time)"
    )
    for name, seconds in (("one-task jobs", jobs_s), (f"one {n}-task job", tasks_s)):
        per = seconds / n * 1000
        overhead = (per / bare_ms - 1) * 100
        rate = n / seconds
        ok = "ok" if overhead <= 25 and rate >= 5 else "MISS"
        print(
            f"{n} {name}: {per:.0f} ms/task, {rate:.1f} tasks/s, overhead {overhead:+.0f}% vs bare "
            f"(targets <= +25%, >= 5/s): {ok}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
