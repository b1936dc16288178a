"""Kubernetes quantities (pure)."""

from __future__ import annotations

from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from iris.testing.k8s_quantity import format_quantity, parse_quantity, pod_requests


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


@pytest.mark.parametrize(
    ("value", "text"), [(24, "24"), (Fraction(1, 2), "500m"), (8 * 2**30, "8Gi"), (1536 * 2**20, "1536Mi")]
)
def test_format(value, text) -> None:
    assert format_quantity(value) == text


@given(st.integers(min_value=0, max_value=2**50))
def test_format_parses_back(value: int) -> None:
    assert parse_quantity(format_quantity(value)) == value


def test_pod_requests_fall_back_to_limits_and_count_init_containers() -> None:
    pod = {
        "spec": {
            "containers": [
                {"name": "a", "resources": {"requests": {"cpu": "1"}, "limits": {"memory": "1Gi"}}},
                {"name": "b", "resources": {"requests": {"cpu": "500m"}}},
            ],
            "initContainers": [
                {"name": "init", "resources": {"requests": {"cpu": "4"}}},
                {"name": "sidecar", "restartPolicy": "Always", "resources": {"requests": {"memory": "1Gi"}}},
            ],
        }
    }
    assert pod_requests(pod) == {"cpu": 4, "memory": 2 * 2**30}
