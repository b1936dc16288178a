"""Kubernetes resource quantities ("500m", "8Gi", "1.5", "2e3") as exact fractions."""

from __future__ import annotations

import re
from fractions import Fraction

_SUFFIX_FACTORS: dict[str, Fraction] = {
    "": Fraction(1),
    "n": Fraction(1, 10**9),
    "u": Fraction(1, 10**6),
    "m": Fraction(1, 1000),
    "k": Fraction(10**3),
    "M": Fraction(10**6),
    "G": Fraction(10**9),
    "T": Fraction(10**12),
    "P": Fraction(10**15),
    "E": Fraction(10**18),
    "Ki": Fraction(2**10),
    "Mi": Fraction(2**20),
    "Gi": Fraction(2**30),
    "Ti": Fraction(2**40),
    "Pi": Fraction(2**50),
    "Ei": Fraction(2**60),
}
_QUANTITY = re.compile(r"^([+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+))(?:([eE][+-]?[0-9]+)|([a-zA-Z]*))$")


def parse_quantity(value: str | int | float) -> Fraction:
    """Parse a Kubernetes quantity; raises ValueError on anything the API server would reject."""
    if isinstance(value, bool):
        raise ValueError(f"quantities must match the regular expression: {value!r}")
    if isinstance(value, int):
        return Fraction(value)
    if isinstance(value, float):
        return Fraction(str(value))
    match = _QUANTITY.match(str(value).strip())
    if not match or (match.group(3) is not None and match.group(3) not in _SUFFIX_FACTORS):
        raise ValueError(
            f"quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$': {value!r}"
        )
    number = Fraction(match.group(1))
    if match.group(2):
        return number * Fraction(10) ** int(match.group(2)[1:])
    return number * _SUFFIX_FACTORS[match.group(3) or ""]


def format_quantity(amount: Fraction | int) -> str:
    """Render a quantity the way kubectl and Kueue messages do: 24, 500m, 8Gi, 1500Mi."""
    amount = Fraction(amount)
    if amount.denominator == 1:
        whole = amount.numerator
        for suffix in ("Ei", "Pi", "Ti", "Gi", "Mi", "Ki"):
            factor = _SUFFIX_FACTORS[suffix].numerator
            if whole >= factor and whole % factor == 0:
                return f"{whole // factor}{suffix}"
        return str(whole)
    millis = amount * 1000
    if millis.denominator == 1:
        return f"{millis.numerator}m"
    return str(float(amount))


def sum_quantities(amounts: list[dict[str, Fraction]]) -> dict[str, Fraction]:
    total: dict[str, Fraction] = {}
    for entry in amounts:
        for name, amount in entry.items():
            total[name] = total.get(name, Fraction(0)) + amount
    return total


def container_requests(container: dict) -> dict[str, Fraction]:
    """Effective requests of one container: requests, with limits standing in where a request is absent."""
    resources = container.get("resources") or {}
    merged = dict(resources.get("limits") or {})
    merged.update(resources.get("requests") or {})
    return {name: parse_quantity(amount) for name, amount in merged.items()}


def pod_requests(pod: dict) -> dict[str, Fraction]:
    """What a pod asks the scheduler for: max(sum of containers + sidecars, each init container)."""
    spec = pod.get("spec") or {}
    init_containers = spec.get("initContainers") or []
    sidecars = [c for c in init_containers if c.get("restartPolicy") == "Always"]
    total = sum_quantities([container_requests(c) for c in [*(spec.get("containers") or []), *sidecars]])
    for init in init_containers:
        if init.get("restartPolicy") == "Always":
            continue
        for name, amount in container_requests(init).items():
            if amount > total.get(name, Fraction(0)):
                total[name] = amount
    return {name: amount for name, amount in total.items() if amount}
