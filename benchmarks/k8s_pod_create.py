"""Kubernetes backend: pods created per second, and API writes per attempt, on the real control plane.

Starts the real control plane (``scripts/k8s-control-plane build`` first, or built here when the
cache lacks it): kube-apiserver with etcd, the real Kueue webhooks gating every pod, kube-scheduler
and node-agent nodes running what Kueue admits, the controller's service-account token under RBAC.
Then drives KubernetesBackend through the controller's contract: one reconcile with N new attempts
(all creates), one idle reconcile (must write nothing), one reconcile stopping them all (all
deletes). Writes are counted from the API server's audit log, which records the controller's
requests only.

    uv run python benchmarks/k8s_pod_create.py --pods 300
    uv run python benchmarks/k8s_pod_create.py --pods 300 --run-dir DIR   # a plane already up

(``--real`` is accepted for old command lines: the real plane is the only mode.)
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path

from iris.cluster.backends.kubernetes import KubernetesBackend, KubernetesBackendConfig
from iris.rpc.enums import StopReason
from iris.rpc.models import DesiredAttempt, Entrypoint, ResourceSpec, RunSpec

# Pods created (accepted by the API server with Kueue's webhooks) per second.
TARGET_PODS_PER_S = 50
WRITE_VERBS = {"create", "update", "patch", "delete", "deletecollection"}


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


def run_real(pods: int, concurrency: int, run_dir: Path | None = None) -> dict[str, object]:
    """On a control plane started here, or on the one already running from ``run_dir``."""
    from iris.testing.control_plane import ControlPlane, ControlPlaneOptions, start_control_plane
    from iris.testing.control_plane.build import ensure_built

    if run_dir is not None:
        cp = ControlPlane.load(run_dir)
        result = measure(cp.controller_kubeconfig, pods, concurrency, audit_write_counter(cp.audit_log))
    else:
        ensure_built(lambda line: print(line, file=sys.stderr, flush=True))
        cp = start_control_plane(ControlPlaneOptions(tied_to_parent=True))
        try:
            print(f"real control plane ready in {cp.ready_seconds}s ({cp.versions})", file=sys.stderr)
            result = measure(cp.controller_kubeconfig, pods, concurrency, audit_write_counter(cp.audit_log))
        finally:
            cp.stop()
    return {"mode": "real kube-apiserver + Kueue webhooks + kube-scheduler + node agent", **result}


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--pods", type=int, default=1000)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--real", action="store_true", help="accepted for old command lines (always real)")
    parser.add_argument(
        "--run-dir",
        type=Path,
        help="use the control plane running from this folder (scripts/k8s-control-plane up --run-dir)",
    )
    parser.add_argument("--json", action="store_true", help="print the result as one JSON object")
    args = parser.parse_args()

    results = [run_real(args.pods, args.concurrency, args.run_dir)]
    if args.json:
        print(json.dumps(results[0]))
    else:
        keys = list(dict.fromkeys(key for result in results for key in result))
        for key in keys:
            print(f"{key:>28}: " + "  |  ".join(str(result.get(key, "-")) for result in results))
    ok = True
    for result in results:
        ok = (
            ok
            and float(result["pods_created_per_s"]) >= TARGET_PODS_PER_S  # type: ignore[arg-type]
            and result["writes_per_attempt_total"] <= 2  # type: ignore[operator]
            and result["writes_idle_round"] == 0
        )
    goal = f">= {TARGET_PODS_PER_S} pods/s, <= 2 writes/attempt, 0 idle writes"
    print(f"target {goal}: {'met' if ok else 'NOT met'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
