"""Kubernetes backend: pods created per second, and API writes per attempt.

Runs the fake API server (iris.testing) in its own process so it does not share a GIL with
the backend, applies `iris k8s manifests` with kubectl, then drives KubernetesBackend
through the controller's contract: one reconcile with N new attempts (all creates), one
idle reconcile (must write nothing), one reconcile stopping them all (all deletes). Writes
are counted exactly from the server's resourceVersion, which every write bumps by one.

With ``--sandbox`` the whole sandbox runs in that process instead (HTTPS + token, Kueue
gating and admitting, the kubelet running each pod): throughput under that load is measured,
but writes cannot be attributed (the simulators write too).

With ``--real`` the backend drives the real control plane (``scripts/k8s-control-plane build``
first): kube-apiserver with etcd, the real Kueue webhooks gating every pod, kube-scheduler and
our node agent running what Kueue admits, the controller's service-account token under RBAC.
Writes are counted from the API server's audit log, which records the controller's requests
only. The fake API server's figures are measured in the same run, for comparison.

    uv run python benchmarks/k8s_pod_create.py --pods 2000
    uv run python benchmarks/k8s_pod_create.py --pods 1000 --sandbox
    uv run python benchmarks/k8s_pod_create.py --pods 300 --real
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from iris.cluster.backends.kubernetes import KubernetesBackend, KubernetesBackendConfig
from iris.cluster.backends.kubernetes.manifests import manifests_yaml, render_manifests
from iris.rpc.enums import StopReason
from iris.rpc.models import DesiredAttempt, Entrypoint, ResourceSpec, RunSpec

TARGET_PODS_PER_S = 200
WRITE_VERBS = {"create", "update", "patch", "delete", "deletecollection"}


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


def measure(kubeconfig: Path, pods: int, concurrency: int, writes: Callable[[], int]) -> dict[str, object]:
    """Create N attempts, one idle round, stop them all; ``writes()`` is a monotonic write counter."""
    config = KubernetesBackendConfig(kubeconfig=str(kubeconfig), max_concurrent_requests=concurrency)
    backend = KubernetesBackend(config, controller_url="http://controller:10000", backend_id="bench")
    desired = attempts(pods)

    w0 = writes()
    t0 = time.perf_counter()
    backend.reconcile(desired)
    create_s = time.perf_counter() - t0
    w1 = writes()

    keep = [DesiredAttempt(attempt_uid=d.attempt_uid, intent="run") for d in desired]
    t1 = time.perf_counter()
    backend.reconcile(keep)
    idle_s = time.perf_counter() - t1
    w2 = writes()

    stop = [
        DesiredAttempt(attempt_uid=d.attempt_uid, intent="stop", stop_reason=StopReason.CANCELLED)
        for d in desired
    ]
    t2 = time.perf_counter()
    backend.reconcile(stop)
    delete_s = time.perf_counter() - t2
    w3 = writes()
    # Running pods go gracefully (the kubelet kills them first): poll like the controller.
    deadline = time.monotonic() + 120
    released = backend.reconcile(stop)
    while not all(o.runtime_released for o in released) and time.monotonic() < deadline:
        time.sleep(0.2)
        released = backend.reconcile(stop)
    release_all_s = time.perf_counter() - t2
    backend.close()
    return {
        "pods": pods,
        "concurrency": concurrency,
        "create_s": round(create_s, 3),
        "pods_created_per_s": round(pods / create_s, 1),
        "idle_reconcile_s": round(idle_s, 3),
        "delete_s": round(delete_s, 3),
        "pods_deleted_per_s": round(pods / delete_s, 1),
        "writes_per_attempt_create": (w1 - w0) / pods,
        "writes_idle_round": w2 - w1,
        "writes_per_attempt_total": (w3 - w0) / pods,
        "all_released": all(o.runtime_released for o in released),
        "stop_to_all_released_s": round(release_all_s, 3),
    }


def audit_write_counter(audit_log: Path) -> Callable[[], int]:
    """Writes (create/update/patch/delete) the audit log has recorded so far, waiting for it to settle."""

    def count() -> int:
        last, stable_since = -1, time.monotonic()
        while True:  # the audit backend flushes asynchronously: wait until the count stops moving
            current = 0
            if audit_log.exists():
                for line in audit_log.read_text().splitlines():
                    event = json.loads(line)
                    if event.get("stage") == "ResponseComplete" and event.get("verb") in WRITE_VERBS:
                        current += 1
            if current != last:
                last, stable_since = current, time.monotonic()
            elif time.monotonic() - stable_since > 1.0:
                return current
            time.sleep(0.2)

    return count


def run_real(pods: int, concurrency: int) -> dict[str, object]:
    from iris.testing.control_plane import ControlPlaneOptions, start_control_plane

    cp = start_control_plane(ControlPlaneOptions(tied_to_parent=True))
    try:
        print(f"real control plane ready in {cp.ready_seconds}s ({cp.versions})", file=sys.stderr)
        result = measure(cp.controller_kubeconfig, pods, concurrency, audit_write_counter(cp.audit_log))
    finally:
        cp.stop()
    return {"mode": "real kube-apiserver + Kueue webhooks + kube-scheduler + node agent", **result}


def run_fake(pods: int, concurrency: int, sandbox_mode: bool) -> dict[str, object]:
    work = Path(tempfile.mkdtemp(prefix="iris-k8s-bench-"))
    sandbox: subprocess.Popen[bytes] | None = None
    server: mp.process.BaseProcess | None = None
    try:
        if sandbox_mode:
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
        result = measure(kubeconfig, pods, concurrency, lambda: resource_version(kubeconfig))
        mode = "sandbox (Kueue + kubelet simulators running)" if sandbox_mode else "fake API server only"
        result = {"mode": mode, **result}
        if sandbox_mode:  # the simulators write too: writes cannot be attributed to the backend
            for key in ("writes_per_attempt_create", "writes_idle_round", "writes_per_attempt_total"):
                del result[key]
        return result
    finally:
        if sandbox is not None:
            sandbox.terminate()
            sandbox.wait(timeout=30)
        if server is not None:
            server.terminate()
            server.join(timeout=10)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--pods", type=int, default=1000)
    parser.add_argument("--concurrency", type=int, default=32)
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--sandbox", action="store_true", help="full sandbox: Kueue and kubelet simulators too")
    mode.add_argument(
        "--real", action="store_true", help="the real control plane, beside the fake API server's figures"
    )
    parser.add_argument("--json", action="store_true", help="print the result as one JSON object")
    args = parser.parse_args()

    results = [run_fake(args.pods, args.concurrency, args.sandbox)]
    if args.real:
        results.append(run_real(args.pods, args.concurrency))
    if args.json:
        print(json.dumps(results if args.real else results[0]))
    else:
        keys = list(dict.fromkeys(key for result in results for key in result))
        for key in keys:
            print(f"{key:>28}: " + "  |  ".join(str(result.get(key, "-")) for result in results))
    ok = True
    for result in results:
        attributable = "writes_per_attempt_total" in result
        ok = (
            ok
            and float(result["pods_created_per_s"]) >= TARGET_PODS_PER_S
            and (  # type: ignore[arg-type]
                not attributable
                or (result["writes_per_attempt_total"] <= 2 and result["writes_idle_round"] == 0)  # type: ignore[operator]
            )
        )
    goal = f">= {TARGET_PODS_PER_S} pods/s, <= 2 writes/attempt, 0 idle writes"
    print(f"target {goal}: {'met' if ok else 'NOT met'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
