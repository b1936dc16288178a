"""Worker settings from command-line flags, validated into one frozen ``WorkerConfig``.

Both entry points (``python -m iris.cluster.worker`` and ``iris worker start``) parse raw flag
strings with ``build_worker_config``; a bad value raises ``WorkerConfigError`` with one sentence.
"""

from __future__ import annotations

import os
import re
import socket
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from iris.rpc.models import DeviceSpec, ResourceSpec
from iris.rpc.units import parse_bytes, parse_cpu_millicores

WORKER_ID_PATTERN = re.compile(r"^[a-zA-Z0-9][a-zA-Z0-9._-]{0,62}$")
_ATTR_KEY = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/:-]{0,127}$")


DEFAULT_TASK_UIDS = (200_000, 299_999)
BUNDLE_MAX_BYTES = 10 * 1000**3  # as safe_unpack's own defaults (that module stays stdlib-only)
BUNDLE_MAX_ENTRIES = 1_000_000


class WorkerConfigError(ValueError):
    """A flag value the worker cannot use; the message is one sentence for the user."""


@dataclass(frozen=True)
class WorkerConfig:
    controller_url: str
    host: str = "127.0.0.1"
    port: int = 0
    worker_id: str | None = None
    cpu_millicores: int | None = None
    memory_bytes: int | None = None
    disk_bytes: int | None = None
    device: DeviceSpec | None = None
    # Look for GPUs/TPUs when no --device is given; ``--device none`` turns detection off.
    detect_devices: bool = True
    device_dir: Path | None = None  # where TPU chip device files live (default /dev; tests point elsewhere)
    attributes: Mapping[str, str] = field(default_factory=dict)
    slice_id: str | None = None
    scale_group: str | None = None
    state_dir: Path | None = None
    ready_file: Path | None = None
    reregister_after_s: float = 5.0
    # Uids attempts run as when the worker is root (None: attempts run as the worker's own uid).
    task_uids: tuple[int, int] | None = DEFAULT_TASK_UIDS
    # Kill every attempt when not reconciled for this long (None: what the controller advises).
    fence_after_s: float | None = None
    # The docker-compatible CLI that runs attempts whose job names an image ($IRIS_CONTAINER_CLI).
    container_cli: str = "docker"
    # A workspace bundle unpacks to at most this many bytes and entries (files and directories).
    bundle_max_bytes: int = BUNDLE_MAX_BYTES
    bundle_max_entries: int = BUNDLE_MAX_ENTRIES


def build_worker_config(
    *,
    controller: str | None,
    host: str = "127.0.0.1",
    port: int | str = 0,
    worker_id: str | None = None,
    cpu: str | None = None,
    memory: str | None = None,
    disk: str | None = None,
    attrs: Sequence[str] = (),
    device: str | None = None,
    slice_id: str | None = None,
    scale_group: str | None = None,
    state_dir: str | None = None,
    ready_file: str | None = None,
    reregister_after: str | float = 5.0,
    task_uids: str | None = None,
    fence_after: str | float | None = None,
    bundle_max_size: str | None = None,
    bundle_max_entries: str | int | None = None,
    environ: Mapping[str, str] | None = None,
) -> WorkerConfig:
    env = os.environ if environ is None else environ
    controller = controller or env.get("IRIS_CONTROLLER_URL")
    if not controller:
        raise WorkerConfigError("no controller given: pass --controller URL or set IRIS_CONTROLLER_URL")
    if not re.match(r"^https?://[^/\s]+", controller):
        raise WorkerConfigError(f"--controller must be an http:// or https:// URL, got {controller!r}")
    try:
        port_number = int(port)
    except ValueError:
        raise WorkerConfigError(f"--port must be a number, got {port!r}") from None
    if not 0 <= port_number <= 65535:
        raise WorkerConfigError(f"--port must be between 0 and 65535, got {port_number}")
    if worker_id is not None and not WORKER_ID_PATTERN.match(worker_id):
        raise WorkerConfigError(
            f"--worker-id {worker_id!r} is not valid: use up to 63 letters, digits, '.', '_' or '-', starting with a letter or digit"
        )
    try:
        reregister = float(reregister_after)
    except ValueError:
        raise WorkerConfigError(
            f"--reregister-after must be a number of seconds, got {reregister_after!r}"
        ) from None
    if reregister <= 0:
        raise WorkerConfigError(f"--reregister-after must be positive, got {reregister_after!r}")
    no_device = device is not None and device.strip().lower() == "none"
    device_dir = env.get("IRIS_DEVICE_DIR")
    fence: float | None = None
    if fence_after is not None:
        try:
            fence = float(fence_after)
        except ValueError:
            raise WorkerConfigError(
                f"--fence-after must be a number of seconds, got {fence_after!r}"
            ) from None
        if not 0 < fence < float("inf"):
            raise WorkerConfigError(
                f"--fence-after must be a positive number of seconds, got {fence_after!r}"
            )
    max_bytes = _quantity(bundle_max_size, "--bundle-max-size", parse_bytes, "e.g. 10GB")
    try:
        max_entries = int(bundle_max_entries) if bundle_max_entries is not None else BUNDLE_MAX_ENTRIES
    except ValueError:
        raise WorkerConfigError(
            f"--bundle-max-entries must be a number, got {bundle_max_entries!r}"
        ) from None
    if max_entries < 1 or (max_bytes is not None and max_bytes < 1):
        raise WorkerConfigError("--bundle-max-size and --bundle-max-entries must be positive")
    attributes = _parse_attributes(env.get("IRIS_WORKER_ATTRIBUTES", "").split(","), "IRIS_WORKER_ATTRIBUTES")
    attributes.update(_parse_attributes(attrs, "--attr"))
    return WorkerConfig(
        controller_url=controller.rstrip("/"),
        host=host,
        port=port_number,
        worker_id=worker_id,
        cpu_millicores=_quantity(cpu, "--cpu", parse_cpu_millicores, "e.g. 4, 0.5 or 500m"),
        memory_bytes=_quantity(memory, "--memory", parse_bytes, "e.g. 4GB or 512Mi"),
        disk_bytes=_quantity(disk, "--disk", parse_bytes, "e.g. 100GB"),
        device=_parse_device(device) if device and not no_device else None,
        detect_devices=not no_device,
        device_dir=Path(device_dir) if device_dir else None,
        attributes=attributes,
        slice_id=slice_id,
        scale_group=scale_group,
        container_cli=env.get("IRIS_CONTAINER_CLI") or "docker",
        state_dir=Path(state_dir).expanduser() if state_dir else None,
        ready_file=Path(ready_file).expanduser() if ready_file else None,
        reregister_after_s=reregister,
        task_uids=_parse_uid_range(task_uids),
        fence_after_s=fence,
        bundle_max_bytes=max_bytes if max_bytes is not None else BUNDLE_MAX_BYTES,
        bundle_max_entries=max_entries,
    )


def _parse_uid_range(text: str | None) -> tuple[int, int] | None:
    if text is None:
        return DEFAULT_TASK_UIDS
    if text.strip().lower() == "off":
        return None
    first, sep, last = text.partition("-")
    if not (sep and first.strip().isdigit() and last.strip().isdigit()):
        raise WorkerConfigError(f"--task-uids must look like 200000-299999 (or off), got {text!r}")
    low, high = int(first), int(last)
    if not 1000 <= low <= high < 2**31 - 1:
        raise WorkerConfigError(f"--task-uids {text!r} must be an ascending range of uids from 1000 up")
    return low, high


def _quantity(raw: str | None, flag: str, parse: Callable[[str], int], example: str) -> int | None:
    if raw is None:
        return None
    try:
        return parse(raw)
    except ValueError:
        raise WorkerConfigError(f"{flag} {raw!r} is not a valid amount ({example})") from None


def _parse_attributes(items: Iterable[str], source: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in items:
        if not item.strip():
            continue
        key, sep, value = item.strip().partition("=")
        if not sep or not _ATTR_KEY.match(key.strip()):
            raise WorkerConfigError(f"{source} {item!r} is not a key=value attribute")
        out[key.strip()] = value.strip()
    return out


def _parse_device(text: str) -> DeviceSpec:
    parts = text.split(":")
    if len(parts) != 3 or not parts[0]:
        raise WorkerConfigError(
            f"--device {text!r} must look like type:variant:count, e.g. gpu:a100:8 or tpu:v5litepod-8:8 (or none)"
        )
    kind, variant, count = parts
    if not count.isdigit() or not 0 < int(count) <= 1024:
        raise WorkerConfigError(f"--device {text!r} needs a count between 1 and 1024")
    return DeviceSpec(type=kind, variant=variant, count=int(count))


def default_worker_id(port: int) -> str:
    """``<hostname>-<port>``, with the hostname reduced to what a worker id may contain."""
    host = re.sub(r"[^a-zA-Z0-9._-]", "-", socket.gethostname().split(".")[0]) or "worker"
    if not host[0].isalnum():
        host = "w" + host
    return f"{host[: 62 - len(str(port))]}-{port}"


def default_state_dir(worker_id: str) -> Path:
    return Path.home() / ".iris" / "workers" / worker_id


def worker_capacity(config: WorkerConfig, state_dir: Path, device: DeviceSpec | None = None) -> ResourceSpec:
    """Flags win; otherwise all cores, all RAM, and the free disk of the state dir. ``device`` is
    what detection found (or the --device flag, refined by detection)."""
    return ResourceSpec(
        cpu_millicores=config.cpu_millicores
        if config.cpu_millicores is not None
        else (os.cpu_count() or 1) * 1000,
        memory_bytes=config.memory_bytes
        if config.memory_bytes is not None
        else psutil.virtual_memory().total,
        disk_bytes=config.disk_bytes
        if config.disk_bytes is not None
        else psutil.disk_usage(str(state_dir)).free,
        device=device if device is not None else config.device,
    )
