"""Human wording of quantities for pending reasons ("8 cpu", "64GB memory", "2 gpu (h100)")."""

from __future__ import annotations

_BYTE_UNITS = (("TB", 1000**4), ("GB", 1000**3), ("MB", 1000**2), ("KB", 1000))


def _trim(value: float) -> str:
    text = f"{value:.2f}".rstrip("0").rstrip(".")
    return text or "0"


def format_cpu(millicores: int) -> str:
    return f"{_trim(millicores / 1000)} cpu"


def format_bytes(amount: int) -> str:
    for unit, size in _BYTE_UNITS:
        if abs(amount) >= size:
            return f"{_trim(round(amount / size, 1))}{unit}"
    return f"{amount}B"


def format_devices(count: int, device_type: str, variant: str = "") -> str:
    kind = device_type or "device"
    return f"{count} {kind} ({variant})" if variant else f"{count} {kind}"


def plural(count: int, singular: str, plural_form: str | None = None) -> str:
    """``plural(1, "worker")`` -> "1 worker"; ``plural(3, "worker")`` -> "3 workers"."""
    return f"{count} {singular if count == 1 else (plural_form or singular + 's')}"


def quote_list(names: list[str], limit: int = 3) -> str:
    """At most ``limit`` names, then "and N more"."""
    shown = ", ".join(names[:limit])
    return shown if len(names) <= limit else f"{shown} and {len(names) - limit} more"
