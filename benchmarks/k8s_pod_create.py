"""Kubernetes backend: pods created per second, and API writes per attempt.

Runs the fake API server (iris.testing) in its own process so it does not share a GIL with
the backend, applies `iris k8s manifests` with kubectl, then drives KubernetesBackend
through the controller's contract: one reconcile with N new attempts (all creates), one
idle reconcile (must write nothing), one reconcile stopping them all (all deletes). Writes
are counted exactly from the server's resourceVersion, which every write bumps by one.

With ``--sandbox`` the whole sandbox runs in that process instead (HTTPS + token, Kueue
gating and admitting, the kubelet running each pod): throughput under that load is measured,
but writes cannot be attributed (the simulators write too).

    uv run python benchmarks/k8s_pod_create.py --pods 2000
    uv run python benchmarks/k8s_pod_create.py --pods 1000 --sandbox
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from iris.cluster.backends.kubernetes import KubernetesBackend, KubernetesBackendConfig
from iris.cluster.backends.kubernetes.manifests import manifests_yaml, render_manifests
from iris.rpc.enums import StopReason
from iris.rpc.models import DesiredAttempt, Entrypoint, ResourceSpec, RunSpec

TARGET_PODS_PER_S = 200


def serve(state_dir: str, ready: mp.Queue) -> None:  # type: ignore[type-arg]
    from iris.testing.fake_apiserver import FakeApiServer

    server = FakeApiServer(state_dir=Path(state_dir)).start()
    ready.put(server.url)
    while True:
        time.sleep(3600)


def start_sandbox_process(work: Path) -> tuple[subprocess.Popen[bytes], Path]:
    ready = work / "ready.json"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "iris.testing.k8s_sandbox",
            "--state-dir",
            str(work / "sandbox"),
            "--ready-file",
            str(ready),
        ],
        stdout=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 60
    while not ready.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError("the sandbox did not start")
        time.sleep(0.05)
    return proc, Path(json.loads(ready.read_text())["kubeconfig"])


def resource_version(kubeconfig: Path) -> int:
    """The server's current resourceVersion, read from an (empty) namespace list."""
    out = subprocess.run(
        [
            "kubectl",
            "--kubeconfig",
            str(kubeconfig),
            "get",
            "--raw",
            "/api/v1/namespaces/iris/configmaps?limit=1",
        ],
        check=True,
        capture_output=True,
    ).stdout
    return int(json.loads(out)["metadata"]["resourceVersion"])


def attempts(n: int) -> list[DesiredAttempt]:
    out = []
    for i in range(n):
        uid = f"{i:016x}"
        spec = RunSpec(
            attempt_uid=uid,
            attempt_number=0,
            job_id="/bench/pods",
            task_id=f"/bench/pods/{i}",
            task_index=i,
            entrypoint=Entrypoint.from_command("true"),
            resources=ResourceSpec(cpu=0.1, memory="64MB"),
            replicas=n,
        )
        out.append(DesiredAttempt(attempt_uid=uid, intent="run", spec=spec))
    return out


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--pods", type=int, default=1000)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument(
        "--sandbox", action="store_true", help="full sandbox: Kueue and kubelet simulators too"
    )
    parser.add_argument("--json", action="store_true", help="print the result as one JSON object")
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="iris-k8s-bench-"))
    sandbox: subprocess.Popen[bytes] | None = None
    server: mp.process.BaseProcess | None = None
    try:
        if args.sandbox:
            sandbox, kubeconfig = start_sandbox_process(work)
            wanted = ("PriorityClass", "WorkloadPriorityClass")
            objects = [o for o in render_manifests(kueue_api_version="v1beta1") if o["kind"] in wanted]
        else:
            ready: mp.Queue = mp.get_context("spawn").Queue()  # type: ignore[type-arg]
            server = mp.get_context("spawn").Process(
                target=serve, args=(str(work / "apiserver"), ready), daemon=True
            )
            server.start()
            from iris.testing.fake_apiserver import write_kubeconfig

            kubeconfig = write_kubeconfig(work / "kubeconfig", ready.get(timeout=60), None, "iris")
            objects = render_manifests(kueue_api_version="v1beta1")
        subprocess.run(
            ["kubectl", "--kubeconfig", str(kubeconfig), "apply", "-f", "-"],
            input=manifests_yaml(objects).encode(),
            check=True,
            capture_output=True,
        )
        config = KubernetesBackendConfig(kubeconfig=str(kubeconfig), max_concurrent_requests=args.concurrency)
        backend = KubernetesBackend(config, controller_url="http://controller:10000", backend_id="bench")
        desired = attempts(args.pods)

        rv0 = resource_version(kubeconfig)
        t0 = time.perf_counter()
        backend.reconcile(desired)
        create_s = time.perf_counter() - t0
        rv1 = resource_version(kubeconfig)

        keep = [DesiredAttempt(attempt_uid=d.attempt_uid, intent="run") for d in desired]
        t1 = time.perf_counter()
        backend.reconcile(keep)
        idle_s = time.perf_counter() - t1
        rv2 = resource_version(kubeconfig)

        stop = [
            DesiredAttempt(attempt_uid=d.attempt_uid, intent="stop", stop_reason=StopReason.CANCELLED)
            for d in desired
        ]
        t2 = time.perf_counter()
        backend.reconcile(stop)
        delete_s = time.perf_counter() - t2
        rv3 = resource_version(kubeconfig)
        # Running pods go gracefully (the kubelet kills them first): poll like the controller.
        deadline = time.monotonic() + 120
        released = backend.reconcile(stop)
        while not all(o.runtime_released for o in released) and time.monotonic() < deadline:
            time.sleep(0.2)
            released = backend.reconcile(stop)
        release_all_s = time.perf_counter() - t2
        backend.close()

        result: dict[str, object] = {
            "mode": "sandbox (Kueue + kubelet simulators running)" if args.sandbox else "API server only",
            "pods": args.pods,
            "concurrency": args.concurrency,
            "create_s": round(create_s, 3),
            "pods_created_per_s": round(args.pods / create_s, 1),
            "idle_reconcile_s": round(idle_s, 3),
            "delete_s": round(delete_s, 3),
            "pods_deleted_per_s": round(args.pods / delete_s, 1),
            "writes_per_attempt_create": (rv1 - rv0) / args.pods,
            "writes_idle_round": rv2 - rv1,
            "writes_per_attempt_total": (rv3 - rv0) / args.pods,
            "all_released": all(o.runtime_released for o in released),
            "stop_to_all_released_s": round(release_all_s, 3),
        }
        if args.sandbox:  # the simulators write too: writes cannot be attributed to the backend
            for key in ("writes_per_attempt_create", "writes_idle_round", "writes_per_attempt_total"):
                del result[key]
        if args.json:
            print(json.dumps(result))
        else:
            for key, value in result.items():
                print(f"{key:>28}: {value}")
        ok = float(result["pods_created_per_s"]) >= TARGET_PODS_PER_S and (  # type: ignore[arg-type]
            args.sandbox or (result["writes_per_attempt_total"] <= 2 and result["writes_idle_round"] == 0)  # type: ignore[operator]
        )
        goal = f">= {TARGET_PODS_PER_S} pods/s" + (
            "" if args.sandbox else ", <= 2 writes/attempt, 0 idle writes"
        )
        print(f"target {goal}: {'met' if ok else 'NOT met'}")
        return 0 if ok else 1
    finally:
        if sandbox is not None:
            sandbox.terminate()
            sandbox.wait(timeout=30)
        if server is not None:
            server.terminate()
            server.join(timeout=10)


if __name__ == "__main__":
    sys.exit(main())
