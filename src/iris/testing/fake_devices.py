"""Stand-ins for accelerators on a machine without any: a fake ``nvidia-smi`` and fake TPU chip files.

``python -m iris.testing.fake_devices gpus DIR --count 4`` writes ``DIR/nvidia-smi``; put ``DIR``
first on ``PATH`` and a worker started there detects four GPUs. ``tpus DIR --count 4`` writes
``DIR/accel0..3``; point ``IRIS_DEVICE_DIR`` at it (and set ``TPU_ACCELERATOR_TYPE``).
``gpu-nodes DIR --count 4`` makes ``DIR/nvidia0..3`` and ``DIR/nvidiactl`` character devices (root):
with ``IRIS_DEVICE_DIR=DIR`` a task in a container image gets its GPUs' nodes as ``/dev/nvidia<i>``.
"""

from __future__ import annotations

import argparse
import os
import shlex
import stat
import sys
from pathlib import Path


def write_fake_nvidia_smi(
    directory: Path,
    count: int = 4,
    name: str = "NVIDIA A100-SXM4-80GB",
    memory_mib: int = 81920,
    *,
    output: str | None = None,
    exit_code: int = 0,
) -> Path:
    """An executable ``nvidia-smi`` that answers the CSV query with ``count`` GPUs (or ``output``)."""
    directory.mkdir(parents=True, exist_ok=True)
    if output is None:
        output = "".join(
            f"{i}, {name}, {memory_mib} MiB, GPU-{i:08d}-fake-{i:04d}-0000-000000000000\n"
            for i in range(count)
        )
    path = directory / "nvidia-smi"
    path.write_text(f"#!/bin/sh\nprintf %s {shlex.quote(output)}\nexit {int(exit_code)}\n")
    path.chmod(0o755)
    return path


def write_fake_tpu_chips(directory: Path, count: int = 4, *, vfio: bool = False) -> Path:
    """Empty files named like TPU chip devices: ``accel0..N`` or ``vfio/0..N``."""
    target = directory / "vfio" if vfio else directory
    target.mkdir(parents=True, exist_ok=True)
    for i in range(count):
        (target / (str(i) if vfio else f"accel{i}")).touch()
    return directory


def write_fake_gpu_nodes(directory: Path, count: int = 4) -> Path:
    """Character devices named like NVIDIA's (``nvidia0..N``, ``nvidiactl``), each a copy of
    ``/dev/zero``'s node: what the container runtime passes with ``--device`` for a fake GPU
    (point ``IRIS_DEVICE_DIR`` at ``directory``). Needs root (mknod)."""
    directory.mkdir(parents=True, exist_ok=True)
    zero = os.makedev(1, 5)
    for name in [f"nvidia{i}" for i in range(count)] + ["nvidiactl"]:
        path = directory / name
        if not path.exists():
            os.mknod(path, stat.S_IFCHR | 0o666, zero)
    return directory


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m iris.testing.fake_devices", description=__doc__)
    parser.add_argument("kind", choices=["gpus", "tpus", "gpu-nodes"])
    parser.add_argument("directory", type=Path)
    parser.add_argument("--count", type=int, default=4)
    parser.add_argument("--name", default="NVIDIA A100-SXM4-80GB", help="GPU model name")
    args = parser.parse_args(argv)
    if not 0 <= args.count <= 1024:
        parser.error("--count must be between 0 and 1024")
    if args.kind == "gpus":
        print(write_fake_nvidia_smi(args.directory, args.count, args.name))
    elif args.kind == "gpu-nodes":
        print(write_fake_gpu_nodes(args.directory, args.count))
    else:
        print(write_fake_tpu_chips(args.directory, args.count))
    return 0


if __name__ == "__main__":
    sys.exit(main())
