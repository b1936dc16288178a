"""Worker dispatch micro-benchmark: one real worker daemon, N `true` attempts pushed through /reconcile.

Plays the controller: a tiny in-process stub answers register and nudge, and the driver reconciles
whenever the worker nudges (or every --tick seconds as the safety net), sending each new attempt's
spec once and bare keeps afterwards, until every attempt is finished and its process released.

    uv run python benchmarks/worker_dispatch.py [--attempts 500] [--batch 50] [--max-in-flight 100] [--runs 3]

Prints attempts/s and start latency (request sent -> process started, from the worker's started_at).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx
import psutil
import uvicorn
from fastapi import FastAPI
from fastapi.responses import JSONResponse
from report import Report, add_common_args, at_least

from iris.rpc.enums import TERMINAL_TASK_STATES, TaskState
from iris.rpc.models import (
    DesiredAttempt,
    Entrypoint,
    ReconcileRequest,
    ReconcileResponse,
    RegisterRequest,
    RegisterResponse,
    ResourceSpec,
    RunSpec,
)
from iris.rpc.signing import new_master_key, sign_request, worker_secret

MASTER_KEY = new_master_key()


def signed(address: str, method: str, target: str, body: bytes | None = None) -> dict[str, str]:
    """Headers as the controller sends them: content type and signature (iris.rpc.signing)."""
    headers = sign_request(worker_secret(MASTER_KEY, address), method, target, body)
    return {"content-type": "application/json", **headers} if body is not None else headers


def start_stub(nudged: threading.Event) -> tuple[str, uvicorn.Server]:
    app = FastAPI()

    @app.post("/api/v1/workers/register")
    def register(request: RegisterRequest) -> RegisterResponse:
        return RegisterResponse(
            worker_id=request.worker_id or "w", rpc_secret=worker_secret(MASTER_KEY, request.address).hex()
        )

    @app.post("/api/v1/workers/{worker_id}/nudge")
    def nudge(worker_id: str) -> JSONResponse:
        nudged.set()
        return JSONResponse({}, status_code=202)

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off"))
    threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True).start()
    while not server.started:
        time.sleep(0.01)
    return f"http://127.0.0.1:{sock.getsockname()[1]}", server


def start_worker(controller_url: str, workdir: Path) -> tuple[subprocess.Popen, str]:
    ready = workdir / "ready.json"
    popen = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "iris.cluster.worker",
            "--controller",
            controller_url,
            "--worker-id",
            "bench",
            "--state-dir",
            str(workdir / "state"),
            "--ready-file",
            str(ready),
        ],
        stderr=open(workdir / "worker.log", "w"),  # noqa: SIM115
    )
    deadline = time.monotonic() + 60
    while not ready.exists():
        if popen.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"worker did not start: {(workdir / 'worker.log').read_text()}")
        time.sleep(0.02)
    return popen, json.loads(ready.read_text())["address"]


def spec(uid: str, index: int) -> RunSpec:
    return RunSpec(
        attempt_uid=uid,
        attempt_number=0,
        job_id="/bench/true",
        task_id=f"/bench/true/{index}",
        task_index=index,
        entrypoint=Entrypoint.from_command("true"),
        resources=ResourceSpec(cpu=0, memory="64MB"),
    )


def run(attempts: int, batch: int, max_in_flight: int, tick: float, client: httpx.Client) -> dict:
    nudged = threading.Event()
    controller_url, server = start_stub(nudged)
    with tempfile.TemporaryDirectory() as tmp:
        popen, address = start_worker(controller_url, Path(tmp))
        deadline = time.monotonic() + 30
        # Until it has registered (and learnt its secret) the worker refuses every call.
        while (
            client.get(
                f"http://{address}/attempts/none/status",
                headers=signed(address, "GET", "/attempts/none/status"),
            ).status_code
            == 401
        ):
            if time.monotonic() > deadline:
                raise RuntimeError("the worker did not register")
            time.sleep(0.05)
        worker = psutil.Process(popen.pid)
        try:
            cpu_before = sum(worker.cpu_times()[:2])
            result = drive(f"http://{address}", attempts, batch, max_in_flight, tick, nudged, client)
            cpu_used = sum(worker.cpu_times()[:2]) - cpu_before
            result["worker_cpu_ms_per_attempt"] = round(cpu_used / attempts * 1000, 3)
            return result
        finally:
            popen.terminate()
            popen.wait(timeout=30)
            server.should_exit = True


def drive(
    base: str, attempts: int, batch: int, max_in_flight: int, tick: float, nudged: threading.Event, client
) -> dict:
    queue = [(f"b{i:06d}", i) for i in range(attempts)]
    in_flight: dict[str, float] = {}  # uid -> wall time its spec was sent
    sent_at: dict[str, float] = {}
    latencies: list[float] = []
    counted: set[str] = set()
    finished = 0
    failed = 0
    rounds = 0
    began = time.perf_counter()
    while finished < attempts:
        desired = [DesiredAttempt(attempt_uid=uid, intent="run") for uid in in_flight]
        room = min(batch, max_in_flight - len(in_flight))
        fresh, queue = queue[: max(room, 0)], queue[max(room, 0) :]
        now = time.time()
        for uid, index in fresh:
            desired.append(DesiredAttempt(attempt_uid=uid, intent="run", spec=spec(uid, index)))
            in_flight[uid] = now
            sent_at[uid] = now
        nudged.clear()
        request = ReconcileRequest(worker_id="bench", attempts=desired)
        body = request.model_dump_json().encode()
        answer = client.post(
            f"{base}/reconcile",
            content=body,
            headers=signed(base.removeprefix("http://"), "POST", "/reconcile", body),
        )
        answer.raise_for_status()
        rounds += 1
        for obs in ReconcileResponse.model_validate_json(answer.content).observations:
            if obs.started_at is not None and obs.attempt_uid not in counted:
                counted.add(obs.attempt_uid)
                latencies.append(obs.started_at - sent_at[obs.attempt_uid])
            if obs.state in TERMINAL_TASK_STATES and obs.runtime_released:
                in_flight.pop(obs.attempt_uid, None)
                finished += 1
                failed += obs.state is not TaskState.SUCCEEDED
            elif obs.state is TaskState.MISSING:
                raise SystemExit(f"worker lost attempt {obs.attempt_uid}")
        if queue and len(in_flight) < max_in_flight:
            continue  # room for the next batch right away
        if finished < attempts:
            nudged.wait(tick)
    elapsed = time.perf_counter() - began
    latencies.sort()
    return {
        "attempts": attempts,
        "failed": failed,
        "seconds": round(elapsed, 3),
        "attempts_per_s": round(attempts / elapsed, 1),
        "start_latency_ms_p50": round(statistics.median(latencies) * 1000, 2),
        "start_latency_ms_p99": round(
            latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))] * 1000, 2
        ),
        "reconcile_rounds": rounds,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_common_args(parser)
    parser.add_argument("--attempts", type=int, default=500)
    parser.add_argument("--batch", type=int, default=50)
    parser.add_argument("--max-in-flight", type=int, default=100)
    parser.add_argument("--tick", type=float, default=0.05, help="safety-net reconcile period (seconds)")
    args = parser.parse_args()
    if args.tiny:
        args.attempts, args.batch, args.max_in_flight, args.runs = 20, 10, 10, 1
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    report = Report(
        "worker_dispatch",
        args,
        {
            "attempts": args.attempts,
            "batch": args.batch,
            "max_in_flight": args.max_in_flight,
            "runs": args.runs,
        },
    )
    results = []
    with httpx.Client(timeout=30) as client:
        for _ in range(args.runs):
            results.append(run(args.attempts, args.batch, args.max_in_flight, args.tick, client))
            report.note(json.dumps(results[-1]))
    if any(r["failed"] for r in results):
        raise SystemExit("some attempts failed")
    report.figure(
        f"one worker daemon, {args.attempts} true attempts through /reconcile",
        [r["attempts_per_s"] for r in results],
        "attempts/s",
        at_least(1200 / 4),  # a quarter of the 4-worker cluster target
    )
    report.figure("  start latency p50", [r["start_latency_ms_p50"] for r in results], "ms")
    report.figure("  start latency p99", [r["start_latency_ms_p99"] for r in results], "ms")
    report.figure("  worker CPU per attempt", [r["worker_cpu_ms_per_attempt"] for r in results], "ms")


if __name__ == "__main__":
    main()
