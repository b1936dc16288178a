"""The accelerators of this machine: NVIDIA GPUs (from ``nvidia-smi``) and TPU chips (from the TPU
environment and ``/dev/accel*`` / ``/dev/vfio/*``), and the environment that gives an attempt its own.

The worker detects them once at start, advertises ``DeviceSpec(type, variant, count)`` and
attributes, and a ``DeviceBroker`` hands every attempt its own indices through
``CUDA_VISIBLE_DEVICES`` or ``TPU_VISIBLE_CHIPS`` (and the TPU process-bounds variables),
releasing them when the attempt's process tree is gone.
"""

from __future__ import annotations

import hashlib
import logging
import math
import os
import re
import subprocess
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from iris.cluster.config import DEVICE_TYPE_ATTRIBUTE, DEVICE_VARIANT_ATTRIBUTE
from iris.cluster.worker.device_allocator import DeviceAllocator, DevicesUnavailable
from iris.rpc.models import DeviceSpec, RunSpec
from iris.rpc.ports import free_port

logger = logging.getLogger(__name__)

NVIDIA_SMI_QUERY = ("--query-gpu=index,name,memory.total,uuid", "--format=csv,noheader")
NVIDIA_SMI_TIMEOUT_S = 15.0
# A subset of a host's chips as one libtpu process: chip count -> its grid (x,y,z).
TPU_SUBSET_BOUNDS = {1: "1,1,1", 2: "1,2,1", 4: "2,2,1", 8: "2,4,1"}
_ACCEL = re.compile(r"^accel(\d+)$")
_GPU_NAME_NOISE = {"nvidia", "tesla", "geforce", "quadro"}


@dataclass(frozen=True, slots=True)
class GpuInfo:
    index: int
    name: str
    memory_mib: int | None
    uuid: str


@dataclass(frozen=True)
class DeviceInventory:
    """What the machine offers: one device type, its variant, the indices an attempt may get."""

    type: str
    variant: str
    indices: tuple[int, ...]
    attributes: Mapping[str, str] = field(default_factory=dict)
    # TPU only: the host's chip grid ("2,2,1"), and whether this worker has every chip of its host
    # (a worker limited by its own TPU_VISIBLE_CHIPS has part of one: its attempts are subsets).
    chips_per_host_bounds: str | None = None
    whole_host: bool = True

    @property
    def count(self) -> int:
        return len(self.indices)

    def spec(self) -> DeviceSpec:
        return DeviceSpec(type=self.type, variant=self.variant, count=self.count)


# ---------------------------------------------------------------- GPUs


def parse_nvidia_smi(text: str) -> list[GpuInfo]:
    """Rows of ``index, name, memory.total, uuid``; a row that does not parse is skipped with a warning."""
    gpus: list[GpuInfo] = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line:
            continue
        fields = [f.strip() for f in line.split(",")]
        if len(fields) != 4 or not fields[0].isdigit() or not fields[1]:
            logger.warning(
                "ignoring a line of nvidia-smi output that is not index,name,memory,uuid: %r", line[:200]
            )
            continue
        memory = re.match(r"^(\d+)\s*MiB$", fields[2], re.IGNORECASE)
        gpus.append(GpuInfo(int(fields[0]), fields[1], int(memory.group(1)) if memory else None, fields[3]))
    seen: set[int] = set()
    unique = []
    for gpu in gpus:
        if gpu.index in seen:
            logger.warning("nvidia-smi listed GPU index %d twice; keeping the first", gpu.index)
            continue
        seen.add(gpu.index)
        unique.append(gpu)
    return unique


def gpu_variant(name: str) -> str:
    """A short lower-case model name: "NVIDIA A100-SXM4-80GB" -> "a100", "NVIDIA GeForce RTX 4090" -> "rtx4090"."""
    words = [w for w in re.split(r"\s+", name.strip()) if w and w.lower() not in _GPU_NAME_NOISE]
    if not words:
        return ""
    first = words[0].lower()
    if first in ("rtx", "gtx") and len(words) > 1:
        first += words[1].lower()
    return re.sub(r"[^a-z0-9]", "", first.split("-")[0])[:64]


def run_nvidia_smi(
    binary: str = "nvidia-smi", run: Callable[..., subprocess.CompletedProcess[str]] = subprocess.run
) -> str | None:
    """nvidia-smi's answer, or None when it is absent, fails or hangs (each logged, never raised)."""
    try:
        done = run(
            [binary, *NVIDIA_SMI_QUERY],
            capture_output=True,
            text=True,
            errors="replace",
            timeout=NVIDIA_SMI_TIMEOUT_S,
            check=False,
        )
    except FileNotFoundError:
        return None
    except (OSError, subprocess.SubprocessError) as exc:
        logger.warning("nvidia-smi could not be run: %s", exc)
        return None
    if done.returncode != 0:
        detail = (done.stderr or done.stdout or "").strip().splitlines()
        logger.warning(
            "nvidia-smi exited with code %d: %s", done.returncode, detail[0][:200] if detail else "no output"
        )
        return None
    return done.stdout


def visible_subset(visible: str | None) -> set[str] | None:
    """The entries of the worker's own CUDA_VISIBLE_DEVICES / TPU_VISIBLE_CHIPS (None: not set)."""
    if visible is None:
        return None
    return {part.strip() for part in visible.split(",") if part.strip()}


def detect_gpus(binary: str = "nvidia-smi", visible: str | None = None) -> DeviceInventory | None:
    """GPUs nvidia-smi lists; with ``visible`` (the worker's own CUDA_VISIBLE_DEVICES) only those
    it names by index or UUID, so GPUs of one machine can be split between workers."""
    output = run_nvidia_smi(binary)
    if output is None:
        return None
    gpus = parse_nvidia_smi(output)
    allowed = visible_subset(visible)
    if allowed is not None and gpus:
        kept = [g for g in gpus if str(g.index) in allowed or g.uuid in allowed]
        logger.info("CUDA_VISIBLE_DEVICES=%s: offering %d of %d GPUs", visible, len(kept), len(gpus))
        gpus = kept
    if not gpus:
        return None
    variants = {gpu_variant(g.name) for g in gpus}
    variant = variants.pop() if len(variants) == 1 else ""
    if not variant:
        logger.warning(
            "GPUs of different models on one worker (%s): advertising no variant",
            ", ".join(g.name for g in gpus),
        )
    attributes = {"gpu-name": gpus[0].name[:128]}
    memories = [g.memory_mib for g in gpus if g.memory_mib is not None]
    if memories:
        attributes["gpu-memory-mib"] = str(min(memories))
    return DeviceInventory("gpu", variant, tuple(g.index for g in gpus), attributes)


def split_gpus(workers: int, environ: Mapping[str, str] | None = None) -> list[str] | None:
    """This machine's GPUs dealt out to ``workers`` local workers, as each one's CUDA_VISIBLE_DEVICES
    (contiguous, the first workers get any extra; "" for a worker left without one). None when
    there is nothing to split: one worker, or no GPU."""
    env = os.environ if environ is None else environ
    if workers <= 1:
        return None
    found = detect_gpus(visible=env.get("CUDA_VISIBLE_DEVICES"))
    if found is None:
        return None
    share, extra = divmod(found.count, workers)
    out, start = [], 0
    for i in range(workers):
        size = share + (1 if i < extra else 0)
        out.append(",".join(str(g) for g in found.indices[start : start + size]))
        start += size
    return out


# ---------------------------------------------------------------- TPUs


def tpu_chip_indices(device_dir: Path) -> list[int]:
    """Chips as the kernel shows them: ``accel0..N`` (v2-v5e) or ``vfio/0..N`` (v5p, v6e)."""
    try:
        accel = sorted(int(m.group(1)) for p in device_dir.iterdir() if (m := _ACCEL.match(p.name)))
    except OSError:
        accel = []
    if accel:
        return accel
    try:
        return sorted(int(p.name) for p in (device_dir / "vfio").iterdir() if p.name.isdigit())
    except OSError:
        return []


def _bounds_product(text: str) -> int | None:
    try:
        numbers = [int(part) for part in text.split(",")]
    except ValueError:
        return None
    return math.prod(numbers) if len(numbers) == 3 and all(n > 0 for n in numbers) else None


def detect_tpus(environ: Mapping[str, str], device_dir: Path) -> DeviceInventory | None:
    """TPU chips, when the TPU environment names an accelerator type or chip device files exist."""
    accelerator = environ.get("TPU_ACCELERATOR_TYPE", "").strip().lower()
    chips = tpu_chip_indices(device_dir) if accelerator or (device_dir / "accel0").exists() else []
    bounds = environ.get("TPU_CHIPS_PER_HOST_BOUNDS", "").strip() or None
    if not chips and accelerator and bounds:
        count = _bounds_product(bounds)
        chips = list(range(count)) if count else []
    allowed = visible_subset(environ.get("TPU_VISIBLE_CHIPS"))
    whole_host = True
    if allowed is not None:
        kept = [c for c in chips if str(c) in allowed]
        whole_host = len(kept) == len(chips)
        chips = kept
    if not chips:
        if accelerator:
            logger.warning("TPU_ACCELERATOR_TYPE=%s but no TPU chips under %s", accelerator, device_dir)
        return None
    if bounds is None or _bounds_product(bounds) != len(chips):
        bounds = TPU_SUBSET_BOUNDS.get(len(chips))
    attributes: dict[str, str] = {}
    if accelerator:
        attributes["tpu-accelerator"] = accelerator[:64]
    topology = environ.get("TPU_TOPOLOGY", "").strip()
    if topology:
        attributes["tpu-topology"] = topology[:64]
    worker_id = environ.get("TPU_WORKER_ID", "").strip()
    if worker_id.isdigit():
        attributes["tpu-worker-id"] = worker_id
    hostnames = environ.get("TPU_WORKER_HOSTNAMES", "").strip()
    if hostnames:
        # Every host of one slice sees the same list: a gang can group_by this attribute.
        attributes["tpu-slice"] = hashlib.sha256(hostnames.encode()).hexdigest()[:12]
        attributes["tpu-hosts"] = str(len(hostnames.split(",")))
    return DeviceInventory("tpu", accelerator, tuple(chips), attributes, bounds, whole_host)


# ---------------------------------------------------------------- the machine


def detect_devices(
    environ: Mapping[str, str] | None = None, device_dir: Path | None = None, nvidia_smi: str = "nvidia-smi"
) -> DeviceInventory | None:
    """GPUs if nvidia-smi finds any, else TPU chips, else None."""
    env = os.environ if environ is None else environ
    directory = device_dir or Path(env.get("IRIS_DEVICE_DIR") or "/dev")
    return detect_gpus(nvidia_smi, env.get("CUDA_VISIBLE_DEVICES")) or detect_tpus(env, directory)


def inventory_from_spec(device: DeviceSpec, detected: DeviceInventory | None) -> DeviceInventory:
    """A device given on the command line: its indices are 0..count-1 unless detection agrees on more."""
    kind = device.type.lower()
    if detected is not None and detected.type == kind and detected.count >= device.count:
        indices = detected.indices[: device.count]
        attributes, bounds = detected.attributes, detected.chips_per_host_bounds
        if detected.count != device.count:
            bounds = TPU_SUBSET_BOUNDS.get(device.count) if kind == "tpu" else None
    else:
        indices = tuple(range(device.count))
        attributes = {}
        bounds = TPU_SUBSET_BOUNDS.get(device.count) if kind == "tpu" else None
    return DeviceInventory(kind, device.variant.lower(), indices, attributes, bounds)


def resolve_devices(
    flag: DeviceSpec | None,
    detect: bool,
    environ: Mapping[str, str] | None = None,
    device_dir: Path | None = None,
) -> DeviceInventory | None:
    """What the worker offers: the --device flag (refined by detection), else what detection finds."""
    detected = detect_devices(environ, device_dir) if detect else None
    if flag is not None and flag.count > 0:
        return inventory_from_spec(flag, detected)
    return detected


def device_attributes(inventory: DeviceInventory | None) -> dict[str, str]:
    """Attributes a constraint can name: device-type, device-variant and the detected details."""
    if inventory is None:
        return {}
    attributes = {DEVICE_TYPE_ATTRIBUTE: inventory.type}
    if inventory.variant:
        attributes[DEVICE_VARIANT_ATTRIBUTE] = inventory.variant
    attributes.update(inventory.attributes)
    return attributes


# ---------------------------------------------------------------- per attempt


def gpu_env(indices: Sequence[int]) -> dict[str, str]:
    """Only these GPUs, numbered as nvidia-smi numbers them (PCI bus order)."""
    visible = ",".join(str(i) for i in indices)
    return {
        "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
        "CUDA_VISIBLE_DEVICES": visible,
        "NVIDIA_VISIBLE_DEVICES": visible or "void",
    }


def tpu_env(inventory: DeviceInventory, chips: Sequence[int], process_port: int) -> dict[str, str]:
    """A whole host keeps the platform's TPU environment (it may be one host of a multi-host slice);
    a subset of its chips becomes a single-host, single-process slice of its own."""
    if inventory.whole_host and tuple(chips) == inventory.indices:
        return {"TPU_VISIBLE_CHIPS": ",".join(str(c) for c in chips)} if chips else {}
    bounds = TPU_SUBSET_BOUNDS.get(len(chips))
    if bounds is None:
        raise DevicesUnavailable(f"{len(chips)} TPU chips cannot run as one process on part of a host")
    return {
        "TPU_VISIBLE_CHIPS": ",".join(str(c) for c in chips),
        "TPU_CHIPS_PER_PROCESS_BOUNDS": bounds,
        "TPU_PROCESS_BOUNDS": "1,1,1",
        "TPU_CHIPS_PER_HOST_BOUNDS": bounds,
        "TPU_HOST_BOUNDS": "1,1,1",
        "TPU_PROCESS_PORT": str(process_port),
        "TPU_PROCESS_ADDRESSES": f"localhost:{process_port}",
        "TPU_WORKER_ID": "0",
        "TPU_WORKER_HOSTNAMES": "localhost",
        "TPU_SKIP_MDS_QUERY": "1",
        "CLOUD_TPU_TASK_ID": "0",
    }


class DeviceBroker:
    """Plugs into ``SubprocessRuntime(devices=...)``: devices for an attempt at launch, back at release."""

    def __init__(self, inventory: DeviceInventory) -> None:
        self.inventory = inventory
        self.allocator = DeviceAllocator(inventory.type, inventory.indices)

    def acquire(self, spec: RunSpec) -> dict[str, str]:
        """The environment giving ``spec``'s attempt its own devices; raises DevicesUnavailable."""
        device = spec.resources.device
        if device is None or device.count == 0:
            # Hide the GPUs from a task that asked for none: it must not grab another task's GPU.
            return gpu_env(()) if self.inventory.type == "gpu" else {}
        wanted = device.count
        if device.type.lower() != self.inventory.type:
            raise DevicesUnavailable(
                f"the attempt needs {device.type} devices but this worker has {self.inventory.type} devices"
            )
        indices = self.allocator.acquire(spec.attempt_uid, wanted)
        if self.inventory.type == "gpu":
            return gpu_env(indices)
        if self.inventory.type == "tpu":
            return tpu_env(self.inventory, indices, free_port())
        return {"IRIS_DEVICE_IDS": ",".join(str(i) for i in indices)}

    def release(self, attempt_uid: str) -> None:
        freed = self.allocator.release(attempt_uid)
        if freed:
            logger.debug("attempt %s released %s devices %s", attempt_uid, self.inventory.type, freed)
