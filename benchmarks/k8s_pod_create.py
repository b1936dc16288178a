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
    uv run python benchmarks/k8s_pod_create.py --real-node --pods 20      # a real kubelet node

With ``--real-node`` the plane's one node is a real kubelet with containerd (root): every pod runs
``sleep 1`` in ``iris-test/busybox:1``, and the benchmark also reports pods per second to Running
and to Succeeded (from the create round to the last pod seen there; goal >= 2 pods/s) before the
stop round.

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
from iris.rpc.enums import StopReason, TaskState
from iris.rpc.models import DesiredAttempt, Entrypoint, ResourceSpec, RunSpec

# Pods created (accepted by the API server with Kueue's webhooks) per second.
TARGET_PODS_PER_S = 50
# Pods per second to Succeeded on a real kubelet (2 cores).
TARGET_REAL_NODE_PODS_PER_S = 2
REAL_NODE_IMAGE = "iris-test/busybox:1"
WRITE_VERBS = {"create", "update", "patch", "delete", "deletecollection"}


def attempts(n: int, argv: tuple[str, ...] = ("true",)) -> list[DesiredAttempt]:
    out = []
    for i in range(n):
        uid = f"{i:016x}"
        spec = RunSpec(
            attempt_uid=uid,
            attempt_number=0,
            job_id="/bench/pods",
            task_id=f"/bench/pods/{i}",
            task_index=i,
            entrypoint=Entrypoint.from_command(*argv),
            resources=ResourceSpec(cpu=0.1, memory="64MB"),
            replicas=n,
        )
        out.append(DesiredAttempt(attempt_uid=uid, intent="run", spec=spec))
    return out


def measure(
    kubeconfig: Path, pods: int, concurrency: int, writes: Callable[[], int], *, real_node: bool = False
) -> dict[str, object]:
    """Create N attempts, one idle round, (on a real node: wait until all ran), stop them all;
    ``writes()`` is a monotonic write counter."""
    image = {"default_image": REAL_NODE_IMAGE} if real_node else {}
    config = KubernetesBackendConfig(kubeconfig=str(kubeconfig), max_concurrent_requests=concurrency, **image)
    backend = KubernetesBackend(config, controller_url="http://controller:10000", backend_id="bench")
    desired = attempts(pods, ("sleep", "1") if real_node else ("true",))

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
    progress: dict[str, object] = {}
    if real_node:
        progress = _run_to_completion(backend, keep, t0)
    w_ran = writes()

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
    ran_writes = {"writes_while_running_per_attempt": (w_ran - w2) / pods} if real_node else {}
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
        **ran_writes,
        **progress,
        "all_released": all(o.runtime_released for o in released),
        "stop_to_all_released_s": round(release_all_s, 3),
    }


def _run_to_completion(
    backend: KubernetesBackend, keep: list[DesiredAttempt], t0: float
) -> dict[str, object]:
    """Reconcile like the controller until every pod has Succeeded; when each was first seen
    Running (or past it) and Succeeded."""
    running_at: dict[str, float] = {}
    done_at: dict[str, float] = {}
    deadline = time.monotonic() + 600
    while len(done_at) < len(keep) and time.monotonic() < deadline:
        now = time.perf_counter() - t0
        for obs in backend.reconcile(keep):
            if obs.state in (TaskState.RUNNING, TaskState.SUCCEEDED, TaskState.FAILED):
                running_at.setdefault(obs.attempt_uid, now)
            if obs.state in (TaskState.SUCCEEDED, TaskState.FAILED):
                done_at.setdefault(obs.attempt_uid, now)
        time.sleep(0.2)
    pods = len(keep)
    to_running = max(running_at.values(), default=float("nan"))
    to_done = max(done_at.values(), default=float("nan"))
    return {
        "all_running_s": round(to_running, 2),
        "pods_to_running_per_s": round(len(running_at) / to_running, 2) if running_at else 0.0,
        "all_succeeded_s": round(to_done, 2),
        "pods_to_succeeded_per_s": round(len(done_at) / to_done, 2) if done_at else 0.0,
        "pods_succeeded": f"{len(done_at)}/{pods}",
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


def run_real(
    pods: int, concurrency: int, run_dir: Path | None = None, *, real_node: bool = False
) -> dict[str, object]:
    """On a control plane started here, or on the one already running from ``run_dir``."""
    from iris.testing.control_plane import ControlPlane, ControlPlaneOptions, start_control_plane
    from iris.testing.control_plane.build import ensure_built

    if run_dir is not None:
        cp = ControlPlane.load(run_dir)
        result = measure(cp.controller_kubeconfig, pods, concurrency, audit_write_counter(cp.audit_log))
    else:
        ensure_built(lambda line: print(line, file=sys.stderr, flush=True))
        options = ControlPlaneOptions(tied_to_parent=True, nodes=0 if real_node else 2, real_node=real_node)
        cp = start_control_plane(options)
        try:
            print(f"real control plane ready in {cp.ready_seconds}s ({cp.versions})", file=sys.stderr)
            counter = audit_write_counter(cp.audit_log)
            result = measure(cp.controller_kubeconfig, pods, concurrency, counter, real_node=real_node)
        finally:
            cp.stop()
    node = "a real kubelet + containerd" if real_node else "node agent"
    return {"mode": f"real kube-apiserver + Kueue webhooks + kube-scheduler + {node}", **result}


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
    parser.add_argument(
        "--real-node",
        action="store_true",
        help="the plane's node is a real kubelet with containerd (root); also pods/s to Running and Succeeded",
    )
    args = parser.parse_args()

    results = [run_real(args.pods, args.concurrency, args.run_dir, real_node=args.real_node)]
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
        if args.real_node:
            ok = ok and float(result["pods_to_succeeded_per_s"]) >= TARGET_REAL_NODE_PODS_PER_S  # type: ignore[arg-type]
    goal = f">= {TARGET_PODS_PER_S} pods/s, <= 2 writes/attempt, 0 idle writes"
    if args.real_node:
        goal += f", >= {TARGET_REAL_NODE_PODS_PER_S} pods/s to Succeeded"
    print(f"target {goal}: {'met' if ok else 'NOT met'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
