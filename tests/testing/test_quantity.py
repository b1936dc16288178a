"""Kubernetes quantities as the node agent reads them (pure)."""

from __future__ import annotations

from fractions import Fraction

import pytest

from iris.testing.kubelet_sim.quantity import parse_quantity


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("500m", Fraction(1, 2)),
        ("2", 2),
        ("1.5", Fraction(3, 2)),
        ("8Gi", 8 * 2**30),
        ("100M", 10**8),
        ("1e3", 1000),
        (3, 3),
        (0.25, Fraction(1, 4)),
    ],
)
def test_parse(text, value) -> None:
    assert parse_quantity(text) == value


@pytest.mark.parametrize("text", ["", "abc", "1Zi", "--1", True])
def test_parse_rejects_garbage(text) -> None:
    with pytest.raises(ValueError):
        parse_quantity(text)
