"""Parsing of ``iris job run`` options into the SDK's types: constraints, devices, sizes, durations.

Every parser raises ``ValueError`` with one sentence; the CLI names the flag (``click.BadParameter``).
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable
from pathlib import Path

from iris.rpc.enums import ConstraintOp
from iris.rpc.models import Constraint, DeviceSpec
from iris.rpc.units import parse_bytes

# ---------------------------------------------------------------- constraints

_KEY = r"[A-Za-z0-9_.:/-]+"
_IN = re.compile(rf"^\s*({_KEY})\s+(not\s+in|in)\s*\(?(.*?)\)?\s*$", re.IGNORECASE)
_COMPARE = re.compile(rf"^\s*({_KEY})\s*(==|!=|>=|<=|=|>|<)\s*(.*?)\s*$")
_BARE = re.compile(rf"^\s*(!?)\s*({_KEY})\s*$")
_SYMBOL_OP = {
    "=": ConstraintOp.EQ,
    "==": ConstraintOp.EQ,
    "!=": ConstraintOp.NE,
    ">": ConstraintOp.GT,
    ">=": ConstraintOp.GE,
    "<": ConstraintOp.LT,
    "<=": ConstraintOp.LE,
}
CONSTRAINT_FORMS = (
    "KEY=VALUE, KEY!=VALUE, 'KEY in (a,b)', KEY>=N (or >, <, <=), KEY (exists) or !KEY (missing)"
)


def parse_constraint(text: str) -> Constraint:
    """``zone=a``, ``zone!=a``, ``zone in (a,b)``, ``mem>=64``, ``gpu`` (exists), ``!spot`` (missing)."""
    match = _IN.match(text)
    if match:
        key, op, rest = match.groups()
        values = [v.strip().strip("'\"") for v in rest.split(",") if v.strip()]
        if not values:
            raise ValueError(f"{text!r} names no values; write e.g. 'zone in (a,b)'")
        if op.lower() != "in":
            raise ValueError(f"{text!r}: 'not in' is not supported; use one KEY!=VALUE per value")
        return Constraint(key=key, op=ConstraintOp.IN, values=values)
    match = _COMPARE.match(text)
    if match:
        key, symbol, value = match.groups()
        if not value:
            raise ValueError(f"{text!r} has no value after {symbol}")
        op = _SYMBOL_OP[symbol]
        if op in (ConstraintOp.GT, ConstraintOp.GE, ConstraintOp.LT, ConstraintOp.LE):
            try:
                float(value)
            except ValueError:
                raise ValueError(f"{text!r}: {symbol} compares numbers, and {value!r} is not one") from None
        return Constraint(key=key, op=op, value=value.strip("'\""))
    match = _BARE.match(text)
    if match:
        negate, key = match.groups()
        return Constraint(key=key, op=ConstraintOp.NOT_EXISTS if negate else ConstraintOp.EXISTS)
    raise ValueError(f"{text!r} is not a constraint; use {CONSTRAINT_FORMS}")


def did_you_mean(value: str, known: Iterable[str]) -> str:
    """`` (did you mean X?)`` for the closest known value, else the list of known values."""
    options = sorted(set(known))
    if not options:
        return ""
    close = difflib.get_close_matches(value, options, n=1, cutoff=0.5)
    if close:
        return f"; did you mean {close[0]}?"
    shown = ", ".join(options[:10]) + (", ..." if len(options) > 10 else "")
    return f"; workers advertise {shown}"


# ---------------------------------------------------------------- devices

_COUNT = re.compile(r"^\d+$")


def parse_gpu(text: str) -> DeviceSpec:
    """``--gpu N`` or ``--gpu TYPE:N`` (``a100:2``): N GPUs per task, of one model if given."""
    parts = text.strip().lower().split(":")
    if len(parts) == 1 and _COUNT.match(parts[0]):
        return _device("gpu", "", parts[0], text)
    if len(parts) == 2 and parts[0] and _COUNT.match(parts[1]):
        return _device("gpu", parts[0], parts[1], text)
    raise ValueError(f"{text!r} is not a GPU request; write N or TYPE:N, e.g. 2 or a100:2")


def parse_device(text: str) -> DeviceSpec:
    """``--device TYPE[:VARIANT][:COUNT]``: ``gpu:h100:8``, ``tpu:v5litepod-8:8``, ``gpu:2``, ``gpu``."""
    parts = [p for p in text.strip().lower().split(":")]
    if not parts[0] or len(parts) > 3 or any(not p for p in parts):
        raise ValueError(f"{text!r} is not a device; write TYPE[:VARIANT][:COUNT], e.g. gpu:h100:8")
    kind = parts[0]
    if len(parts) == 1:
        return _device(kind, "", "1", text)
    if len(parts) == 2:
        return (
            _device(kind, "", parts[1], text)
            if _COUNT.match(parts[1])
            else _device(kind, parts[1], "1", text)
        )
    if not _COUNT.match(parts[2]):
        raise ValueError(f"{text!r}: the count {parts[2]!r} is not a whole number")
    return _device(kind, parts[1], parts[2], text)


def _device(kind: str, variant: str, count: str, text: str) -> DeviceSpec:
    n = int(count)
    if n < 1 or n > 1024:
        raise ValueError(f"{text!r}: the count must be between 1 and 1024")
    if len(kind) > 64 or len(variant) > 64:
        raise ValueError(f"{text!r}: device type and variant have at most 64 characters")
    return DeviceSpec(type=kind, variant=variant, count=n)


_TPU = re.compile(r"^(v\d+[a-z]*(?:pod)?)(?:-(\d+|\d+x\d+(?:x\d+)?))?$")


def parse_tpu(text: str) -> tuple[str, str | None]:
    """``--tpu TYPE[-TOPOLOGY]`` -> (generation, topology or chip count), e.g. ``v5litepod-16``,
    ``v4-2x2x1``, ``v6e-8``. The worker's accelerator type decides chips per task (``tpu_request``)."""
    match = _TPU.match(text.strip().lower())
    if not match:
        raise ValueError(
            f"{text!r} is not a TPU type; write TYPE[-TOPOLOGY], e.g. v5litepod-8, v6e-16 or v4-2x2x1"
        )
    return match.group(1), match.group(2)


# ---------------------------------------------------------------- sizes and durations


def parse_memory_mb(text: str) -> int:
    """A size in bytes; a bare number is megabytes (as in Slurm), ``512B`` is bytes."""
    value = text.strip()
    if re.fullmatch(r"[0-9]*\.?[0-9]+", value):
        value += "MB"
    return parse_bytes(value)


_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)\s*([smhd])")
_DURATION_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
_CLOCK = re.compile(r"^(?:(\d+)-)?(?:(\d+):)?(\d+):(\d+(?:\.\d+)?)$")
DURATION_FORMS = "90 or 90s, 30m, 1h30m, 2d, or H:MM:SS like 1:00:00"


def parse_duration(text: str) -> float:
    """Seconds from ``90``, ``90s``, ``30m``, ``1h30m``, ``2d``, ``MM:SS``, ``H:MM:SS`` or ``D-H:MM:SS``."""
    value = text.strip().lower()
    seconds: float | None = None
    if re.fullmatch(r"\d+(?:\.\d+)?", value):
        seconds = float(value)
    elif (clock := _CLOCK.match(value)) is not None:
        days, hours, minutes, secs = clock.groups()
        if hours is None and days is not None:
            hours, minutes, secs = minutes, secs, "0"  # D-H:MM
        seconds = int(days or 0) * 86400 + int(hours or 0) * 3600 + int(minutes) * 60 + float(secs)
    else:
        parts = _DURATION_PART.findall(value)
        if parts and re.sub(r"\s+", "", value) == "".join(n + u for n, u in parts):
            seconds = sum(float(n) * _DURATION_UNITS[u] for n, u in parts)
    if seconds is None:
        raise ValueError(f"{text!r} is not a duration; use {DURATION_FORMS}")
    if seconds <= 0:
        raise ValueError(f"{text!r}: a duration must be longer than zero")
    return seconds


# ---------------------------------------------------------------- TPUs as workers offer them


class TpuRequest:
    """What ``--tpu`` asks for on this cluster: the device per task, constraints, hosts per slice."""

    def __init__(self, device: DeviceSpec, constraints: list[Constraint], hosts: int) -> None:
        self.device = device
        self.constraints = constraints
        self.hosts = hosts


def tpu_request(text: str, workers: Iterable[tuple[DeviceSpec | None, dict[str, str]]]) -> TpuRequest:
    """Resolve ``--tpu`` against the TPU hosts workers advertise (device spec and attributes).

    A task takes every chip of one host; a slice of several hosts is a gang of one task per host.
    """
    generation, topology = parse_tpu(text)
    offers = [(d, a) for d, a in workers if d is not None and d.type.lower() == "tpu"]
    grid = topology is not None and "x" in topology
    wanted = f"{generation}-{topology}" if topology and not grid else None

    def matches(device: DeviceSpec, attributes: dict[str, str]) -> bool:
        variant = device.variant.lower()
        if wanted is not None:
            return variant == wanted
        if not (variant == generation or variant.startswith(generation + "-")):
            return False
        return not grid or attributes.get("tpu-topology", "").lower() == topology

    found = [(d, a) for d, a in offers if matches(d, a)]
    if not found:
        offered = sorted({d.variant or "tpu" for d, _ in offers})
        if not offered:
            raise ValueError(
                f"no worker offers a TPU, so the chips per task of {text!r} are unknown; "
                f"ask with --device tpu:{text}:CHIPS"
            )
        raise ValueError(f"no worker offers TPU {text!r}{did_you_mean(text, offered)}")
    variants = sorted({d.variant.lower() for d, _ in found})
    if len(variants) > 1:
        raise ValueError(f"{text!r} matches TPUs {', '.join(variants)}; name one of them")
    chips = max(d.count for d, _ in found)
    hosts = max(int(a.get("tpu-hosts", "1")) if a.get("tpu-hosts", "1").isdigit() else 1 for _, a in found)
    constraints = [Constraint(key="tpu-topology", op=ConstraintOp.EQ, value=topology)] if grid else []
    return TpuRequest(DeviceSpec(type="tpu", variant=variants[0], count=chips), constraints, hosts)


# ---------------------------------------------------------------- requirements files

REQUIREMENT_FLAGS = ("-r", "--requirement")


def expand_requirement_files(
    pip: Iterable[str], command: list[str], base: Path
) -> tuple[list[str], list[str]]:
    """``--pip -r FILE`` (or ``--pip -r=FILE``) beside package names: the file's requirements, read
    from the workspace directory ``base`` (so the file travels in the job's bundle).

    Click hands ``--pip -r requirements.txt`` over as the value ``-r`` followed by a command that
    starts with the file name: that first word is taken back. Returns the requirements and the
    command that is left.
    """
    out: list[str] = []
    for value in pip:
        if value in REQUIREMENT_FLAGS:
            if not command:
                raise ValueError("--pip -r needs a requirements file, e.g. --pip -r requirements.txt")
            name, command = command[0], command[1:]
        elif value.startswith(tuple(f"{flag}=" for flag in REQUIREMENT_FLAGS)):
            name = value.split("=", 1)[1]
        else:
            out.append(value)
            continue
        out.extend(read_requirements(base / name, base))
    return out, command


def read_requirements(path: Path, base: Path, seen: frozenset[Path] = frozenset()) -> list[str]:
    """The requirements of a pip requirements file inside ``base`` (``-r`` nests); options that
    would steer the installer (``--index-url``, ``-e``, ``-c``...) are refused, naming the line."""
    resolved = path.resolve()
    shown = path.relative_to(base) if path.is_relative_to(base) else path
    if not resolved.is_relative_to(base.resolve()):
        raise ValueError(f"{shown} is outside the workspace ({base}); put the requirements file in it")
    if resolved in seen:
        raise ValueError(f"{shown} includes itself (through -r)")
    try:
        text = resolved.read_text()
    except OSError as exc:
        raise ValueError(f"cannot read requirements file {shown}: {exc.strerror or exc}") from None
    out: list[str] = []
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.split(" #", 1)[0].strip()
        if not line or line.startswith("#"):
            continue
        parts = line.split(None, 1)
        if parts[0] in REQUIREMENT_FLAGS and len(parts) == 2:
            out.extend(read_requirements(resolved.parent / parts[1].strip(), base, seen | {resolved}))
        elif line.startswith("-"):
            raise ValueError(
                f"{shown} line {number}: {parts[0]} is an installer option; Iris takes requirements only"
            )
        else:
            out.append(line)
    return out
