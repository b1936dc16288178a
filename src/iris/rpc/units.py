"""Parsing of human resource quantities: "2GB", "512Mi", "500m", 1.5."""

from __future__ import annotations

import math
import re

_MEMORY_UNITS = {
    "": 1,
    "b": 1,
    "k": 1000,
    "kb": 1000,
    "m": 1000**2,
    "mb": 1000**2,
    "g": 1000**3,
    "gb": 1000**3,
    "t": 1000**4,
    "tb": 1000**4,
    "ki": 1024,
    "kib": 1024,
    "mi": 1024**2,
    "mib": 1024**2,
    "gi": 1024**3,
    "gib": 1024**3,
    "ti": 1024**4,
    "tib": 1024**4,
}
# The largest cpu request a spec may carry (ResourceSpec bounds millicores the same way).
MAX_CPU_CORES = 10_000
_QUANTITY = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*([a-zA-Z]*)\s*$")


def parse_bytes(value: int | float | str) -> int:
    """Parse a memory or disk size into bytes; raises ValueError with a readable message."""
    if isinstance(value, bool):
        raise ValueError(f"not a size: {value!r}")
    if isinstance(value, int | float):
        if not math.isfinite(value):
            raise ValueError(f"not a size: {value!r} (a size must be a finite number)")
        if value < 0:
            raise ValueError(f"size must not be negative: {value!r}")
        return int(value)
    match = _QUANTITY.match(str(value))
    if not match or match.group(2).lower() not in _MEMORY_UNITS:
        raise ValueError(f"not a size: {value!r} (use e.g. 512MB, 2GB, 1Gi)")
    size = float(match.group(1)) * _MEMORY_UNITS[match.group(2).lower()]
    if not math.isfinite(size):  # hundreds of digits: int(inf) would raise OverflowError
        raise ValueError(f"size {value!r} is more than any machine has")
    return int(size)


def _millicores(cores: float, given: object) -> int:
    # Bounded first: cores * 1000 of a huge float is inf, and round(inf) raises OverflowError.
    if cores > MAX_CPU_CORES:
        raise ValueError(f"cpu {given!r} is more than any machine has (at most {MAX_CPU_CORES:,} cores)")
    return round(cores * 1000)


def parse_cpu_millicores(value: int | float | str) -> int:
    """Parse a cpu amount (cores as a number, or "500m") into millicores."""
    if isinstance(value, bool):
        raise ValueError(f"not a cpu amount: {value!r}")
    if isinstance(value, int | float):
        if not math.isfinite(value):
            raise ValueError(f"not a cpu amount: {value!r} (cpu must be a finite number)")
        if value < 0:
            raise ValueError(f"cpu must not be negative: {value!r}")
        return _millicores(value, value)
    text = str(value).strip()
    cores: float | None = None
    millis = 0  # set below: from "500m" directly, or from the cores
    try:
        if text.endswith("m"):
            millis = int(text[:-1])
        else:
            cores = float(text)
            if not math.isfinite(cores):
                raise ValueError(text)
    except ValueError:
        raise ValueError(f"not a cpu amount: {value!r} (use e.g. 1, 0.5 or 500m)") from None
    if cores is not None:
        millis = _millicores(cores, value)
    if millis < 0:
        raise ValueError(f"cpu must not be negative: {value!r}")
    return millis


def format_bytes(n: int) -> str:
    for unit, size in (("TB", 1000**4), ("GB", 1000**3), ("MB", 1000**2), ("KB", 1000)):
        if n >= size:
            return f"{n / size:.3g}{unit}"
    return f"{n}B"


def format_cpu(millicores: int) -> str:
    if millicores % 1000 == 0:
        return str(millicores // 1000)
    return f"{millicores / 1000:g}"
