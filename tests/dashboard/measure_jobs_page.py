"""Measure the Jobs page and the jobs API against 10,000 stored jobs (not collected by pytest).

    uv run python tests/dashboard/measure_jobs_page.py [--jobs 10000] [--json]

Starts a local cluster with no worker (so every job stays PENDING and the scheduler keeps
looking at all of them), submits the jobs over HTTP, then times the list queries the dashboard
makes and the Jobs page in Debian's chromium: from DOMContentLoaded to the table rendered.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.dashboard.conftest import CHROMIUM, CHROMIUM_ARGS  # noqa: E402

from iris.client import LocalCluster  # noqa: E402


def submit_all(url: str, count: int, threads: int = 8) -> float:
    def worker(indices: range) -> None:
        with httpx.Client(base_url=url, timeout=60) as http:
            for i in indices:
                body = {
                    "name": f"bulk-{i:05d}",
                    "user": f"user{i % 7}",
                    "entrypoint": {"kind": "command", "argv": ["true"]},
                    "resources": {"cpu_millicores": 100, "memory_bytes": 10_000_000},
                }
                http.post("/api/v1/jobs", json=body).raise_for_status()

    t0 = time.perf_counter()
    step = (count + threads - 1) // threads
    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(worker, [range(s, min(count, s + step)) for s in range(0, count, step)]))
    return time.perf_counter() - t0


def time_get(http: httpx.Client, path: str, params: dict[str, object], repeats: int = 15) -> dict[str, float]:
    samples = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        http.get(path, params=params).raise_for_status()
        samples.append((time.perf_counter() - t0) * 1000)
    return {"p50_ms": round(statistics.median(samples), 1), "max_ms": round(max(samples), 1)}


def time_page(url: str, repeats: int = 5) -> dict[str, float]:
    from playwright.sync_api import sync_playwright

    samples, totals = [], []
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, headless=True)
        for _ in range(repeats):
            context = browser.new_context(viewport={"width": 1440, "height": 900})
            page = context.new_page()
            page.goto(f"{url}/#/jobs")
            page.wait_for_selector(".page-jobs[data-loaded]")
            nav = page.evaluate(
                "() => { const n = performance.getEntriesByType('navigation')[0];"
                " const m = performance.getEntriesByName('iris:jobs-rendered')[0];"
                " return {dcl: n.domContentLoadedEventEnd, rendered: m.startTime}; }"
            )
            assert page.locator("tbody tr").count() == 50
            samples.append(nav["rendered"] - nav["dcl"])
            totals.append(nav["rendered"])
            context.close()
        browser.close()
    return {
        "dcl_to_table_p50_ms": round(statistics.median(samples), 1),
        "dcl_to_table_max_ms": round(max(samples), 1),
        "navigation_to_table_p50_ms": round(statistics.median(totals), 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--state-dir", type=Path, help="Keep the cluster's files (and its database) here.")
    args = parser.parse_args()
    results: dict[str, object] = {"jobs": args.jobs}
    with LocalCluster(workers=0, state_dir=args.state_dir) as lc:
        results["submit_s"] = round(submit_all(lc.url, args.jobs), 1)
        with httpx.Client(base_url=lc.url, timeout=60) as http:
            assert http.get("/api/v1/jobs", params={"limit": 1}).json()["total"] == args.jobs
            queries = {
                "jobs limit=50": {"limit": 50},
                "jobs limit=50 last page": {"limit": 50, "offset": args.jobs - 50},
                "jobs state=PENDING": {"limit": 50, "state": "PENDING"},
                "jobs sort=job_id asc": {"limit": 50, "sort": "job_id", "desc": "false"},
                "jobs user=user3": {"limit": 50, "user": "user3"},
                "jobs name~bulk-09": {"limit": 50, "name": "bulk-09"},
            }
            results["api"] = {k: time_get(http, "/api/v1/jobs", p) for k, p in queries.items()}
            results["api"]["cluster"] = time_get(http, "/api/v1/cluster", {})  # type: ignore[index]
            results["api"]["scheduler limit=1000"] = time_get(http, "/api/v1/scheduler", {"limit": 1000})  # type: ignore[index]
        results["page"] = time_page(lc.url)
    if args.json:
        print(json.dumps(results, indent=2))
        return
    print(f"{args.jobs} jobs submitted in {results['submit_s']}s")
    for name, r in results["api"].items():  # type: ignore[union-attr]
        print(f"  GET {name:<28} p50 {r['p50_ms']:>7} ms   max {r['max_ms']:>7} ms")
    page = results["page"]
    print(
        f"  Jobs page: DOMContentLoaded -> table rendered p50 {page['dcl_to_table_p50_ms']} ms (max {page['dcl_to_table_max_ms']} ms); from navigation p50 {page['navigation_to_table_p50_ms']} ms"
    )  # type: ignore[index]


if __name__ == "__main__":
    main()
