"""``python -m iris.cluster.worker [flags]``: run a worker daemon (same flags as ``iris worker start``)."""

from __future__ import annotations

import argparse
import sys
from typing import NoReturn

from iris.cluster.worker.config import WorkerConfigError, build_worker_config
from iris.cluster.worker.main import run_worker


class _OneLineErrors(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        self.exit(2, f"iris worker: {message}\n")


def main(argv: list[str] | None = None) -> int:
    parser = _OneLineErrors(prog="python -m iris.cluster.worker", description="Run an Iris worker daemon.")
    parser.add_argument("--controller", help="controller URL (default: $IRIS_CONTROLLER_URL)")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", default="0")
    parser.add_argument("--worker-id")
    parser.add_argument("--cpu", help="cores to offer, e.g. 4, 0.5 or 500m (default: all)")
    parser.add_argument("--memory", help="memory to offer, e.g. 4GB (default: all RAM)")
    parser.add_argument("--disk", help="disk to offer, e.g. 100GB (default: free space of the state dir)")
    parser.add_argument("--attr", action="append", default=[], help="worker attribute key=value (repeatable)")
    parser.add_argument(
        "--device",
        help="accelerator type:variant:count, e.g. gpu:a100:8 (default: detected GPUs or TPU chips; none: no device)",
    )
    parser.add_argument("--slice-id")
    parser.add_argument("--scale-group")
    parser.add_argument("--state-dir", help="default: ~/.iris/workers/<worker id>")
    parser.add_argument("--ready-file", help="write {worker_id, address} JSON here once serving")
    parser.add_argument(
        "--reregister-after", default="5", help="seconds without a reconcile before registering again"
    )
    parser.add_argument(
        "--task-uids",
        help="when run as root, each attempt runs as its own uid from this range (default 200000-299999; off: as root)",
    )
    parser.add_argument(
        "--fence-after",
        help="seconds without a reconcile after which the worker kills its own attempts (default: as the controller advises)",
    )
    parser.add_argument(
        "--bundle-max-size", help="a workspace bundle unpacks to at most this much (default 10GB)"
    )
    parser.add_argument(
        "--bundle-max-entries",
        help="a workspace bundle unpacks to at most this many files and directories (default 1000000)",
    )
    parser.add_argument(
        "--log-format",
        choices=["text", "json"],
        help="log lines as text or JSON (default: $IRIS_LOG_FORMAT or text)",
    )
    parser.add_argument("--log-file", help="write logs to this file, rotated (default: stderr)")
    args = parser.parse_args(argv)
    try:
        config = build_worker_config(
            controller=args.controller,
            host=args.host,
            port=args.port,
            worker_id=args.worker_id,
            cpu=args.cpu,
            memory=args.memory,
            disk=args.disk,
            attrs=args.attr,
            device=args.device,
            slice_id=args.slice_id,
            scale_group=args.scale_group,
            state_dir=args.state_dir,
            ready_file=args.ready_file,
            reregister_after=args.reregister_after,
            task_uids=args.task_uids,
            fence_after=args.fence_after,
            bundle_max_size=args.bundle_max_size,
            bundle_max_entries=args.bundle_max_entries,
        )
        return run_worker(config, log_format=args.log_format, log_file=args.log_file)
    except WorkerConfigError as exc:
        print(f"iris worker: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
