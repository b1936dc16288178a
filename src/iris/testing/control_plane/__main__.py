"""``python -m iris.testing.control_plane up|down|status`` (what ``scripts/k8s-control-plane`` runs),
and ``serve``: build what is missing, start, write ``--ready-file``, stay in the foreground until
SIGTERM/SIGINT, then stop everything (what ``iris cluster start --local --backend kubernetes`` runs)."""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
from pathlib import Path

from iris.testing.control_plane.binaries import MissingBinaries, cache_root
from iris.testing.control_plane.build import ensure_built
from iris.testing.control_plane.cluster import (
    STATE_FILE,
    ControlPlane,
    ControlPlaneOptions,
    start_control_plane,
    stop_run_dir,
)
from iris.testing.control_plane.processes import StartupError, alive
from iris.testing.control_plane.real_node import RUNTIME, missing_requirements

# Task pods on a real node run this locally built image by default (iris.testing.images).
REAL_NODE_IMAGE = "iris-test/python:3.11"


def _default_run_dir() -> Path:
    return cache_root() / "run"


def _summary(cp: ControlPlane) -> dict[str, object]:
    return {
        "server_url": cp.server_url,
        "admin_kubeconfig": str(cp.admin_kubeconfig),
        "controller_kubeconfig": str(cp.controller_kubeconfig),
        "namespace": cp.namespace,
        "local_queue": cp.local_queue,
        "cluster_queue": cp.cluster_queue,
        "node_names": cp.node_names,
        "run_dir": str(cp.run_dir),
        "versions": cp.versions,
        "ready_seconds": cp.ready_seconds,
        "real_node": cp.real_node_name,
        # The host end of the real node's veth: pods reach the host (a controller) there.
        "node_ip": str(cp.real_node["node_ip"]) if cp.real_node else None,
    }


def _real_node(choice: str) -> tuple[bool, str]:
    """Whether to run a real kubelet node, and the one line that says which nodes run pods."""
    missing = missing_requirements()
    if choice == "no" or (choice == "auto" and missing):
        why = f"; no real kubelet here: needs {', '.join(missing)}" if missing else ""
        return False, f"node agent (pods run as local process groups{why})"
    if missing:
        raise StartupError(f"this machine cannot run a real kubelet node (missing: {', '.join(missing)})")
    return (
        True,
        f"real kubelet, {RUNTIME} (pods run in containers; image {REAL_NODE_IMAGE} unless the job names one)",
    )


def _up(args: argparse.Namespace) -> int:
    run_dir: Path = args.run_dir
    state = run_dir / STATE_FILE
    if state.is_file():
        pids = json.loads(state.read_text()).get("pids") or {}
        if any(alive(pid) for pid in pids.values()):
            print(f"a control plane is already running from {run_dir}; run `down` first", file=sys.stderr)
            return 1
        stop_run_dir(run_dir)
    options = ControlPlaneOptions(
        nodes=args.nodes, node_cpu=args.node_cpu, node_memory=args.node_memory, run_dir=run_dir
    )
    cp = start_control_plane(options)
    print(json.dumps(_summary(cp), indent=2))
    print(f"\nexport KUBECONFIG={cp.admin_kubeconfig}", file=sys.stderr)
    return 0


def _serve(args: argparse.Namespace) -> int:
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    ensure_built(lambda line: print(line, file=sys.stderr, flush=True))
    real, runtime = _real_node(args.real_node)
    options = ControlPlaneOptions(
        nodes=0 if real else args.nodes,
        real_node=real,
        node_cpu=args.node_cpu,
        node_memory=args.node_memory,
        run_dir=args.run_dir,
        tied_to_parent=True,  # the components die with this process, whatever ends it
    )
    stop_run_dir(args.run_dir)  # what a killed earlier run left
    cp = start_control_plane(options)
    try:
        summary = {**_summary(cp), "pid": os.getpid(), "runtime": runtime}
        if real:
            summary["default_image"] = REAL_NODE_IMAGE
        if args.ready_file is not None:
            tmp = args.ready_file.with_name(args.ready_file.name + ".tmp")
            tmp.write_text(json.dumps(summary))
            tmp.replace(args.ready_file)
        print(json.dumps(summary), flush=True)
        stop.wait()
    finally:
        cp.stop()
    return 0


def _down(args: argparse.Namespace) -> int:
    if not stop_run_dir(args.run_dir):
        print(f"no control plane state in {args.run_dir}", file=sys.stderr)
        return 1
    print(f"stopped the control plane of {args.run_dir}")
    return 0


def _status(args: argparse.Namespace) -> int:
    state = args.run_dir / STATE_FILE
    if not state.is_file():
        print(f"no control plane state in {args.run_dir}", file=sys.stderr)
        return 1
    data = json.loads(state.read_text())
    for name, pid in (data.get("pids") or {}).items():
        print(f"{name:<26} pid {pid:<8} {'running' if alive(pid) else 'stopped'}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="scripts/k8s-control-plane")
    sub = parser.add_subparsers(dest="command", required=True)
    for name in ("up", "serve", "down", "status"):
        command = sub.add_parser(name)
        command.add_argument(
            "--run-dir", type=Path, default=_default_run_dir(), help="state, logs, kubeconfigs"
        )
        if name == "serve":
            command.add_argument("--ready-file", type=Path, help="JSON summary written once ready")
        if name in ("up", "serve"):
            command.add_argument("--nodes", type=int, default=2)
            command.add_argument("--node-cpu", default="4")
            command.add_argument("--node-memory", default="8Gi")
        if name == "serve":
            command.add_argument(
                "--real-node",
                choices=["auto", "yes", "no"],
                default="no",
                help="a real kubelet + containerd node instead of the node-agent nodes "
                "(auto: when this machine allows it: root, cgroups, containerd, runc, CNI plugins)",
            )
    args = parser.parse_args(argv)
    try:
        return {"up": _up, "serve": _serve, "down": _down, "status": _status}[args.command](args)
    except (MissingBinaries, StartupError) as exc:
        print(str(exc), file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
