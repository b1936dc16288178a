"""Pure helpers: pod log line parsing, Kueue workload reasons, overview summaries."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import pytest
from k8s_pod_factory import make_pod, running

from iris.cluster.backends.kubernetes.kueue import (
    kueue_reasons_by_pod,
    summarize_workloads,
    workload_pending_reason,
)
from iris.cluster.backends.kubernetes.logs import parse_log_line
from iris.cluster.backends.kubernetes.overview import summarize_node, summarize_pods


@pytest.mark.parametrize(
    ("raw", "ts", "text"),
    [
        ("2024-05-01T10:00:00.123456789Z hello world", "2024-05-01T10:00:00.123456+00:00", "hello world"),
        ("2024-05-01T10:00:00Z ", "2024-05-01T10:00:00+00:00", ""),
        ("2024-05-01T12:00:00+02:00 tz", "2024-05-01T10:00:00+00:00", "tz"),
        ("2024-05-01T10:00:00Z   indented\n", "2024-05-01T10:00:00+00:00", "  indented"),
    ],
)
def test_parse_log_line(raw: str, ts: str, text: str) -> None:
    line = parse_log_line(raw)
    assert line.line == text
    assert line.ts == pytest.approx(datetime.fromisoformat(ts).timestamp())
    assert line.stream == "stdout"


def test_unstamped_line_keeps_text_and_fallback_time() -> None:
    line = parse_log_line("no timestamp here", fallback_ts=5.0)
    assert (line.line, line.ts) == ("no timestamp here", 5.0)


def workload(
    name: str, *, owners: list[str] = (), conditions: list[dict[str, Any]] | None = None
) -> dict[str, Any]:
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Workload",
        "metadata": {
            "name": name,
            "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": o, "uid": o} for o in owners],
        },
        "spec": {"queueName": "iris", "priorityClassRef": {"name": "iris-batch"}},
        "status": {"conditions": conditions or []},
    }


QUOTA_FALSE = {"type": "QuotaReserved", "status": "False", "reason": "Pending", "message": "insufficient cpu"}
ADMITTED = {"type": "Admitted", "status": "True", "reason": "Admitted"}


def test_workload_pending_reason() -> None:
    assert workload_pending_reason(workload("w", conditions=[QUOTA_FALSE])) == "insufficient cpu"
    assert workload_pending_reason(workload("w", conditions=[ADMITTED])) is None
    assert workload_pending_reason(workload("w")) == "queued in LocalQueue iris"


def test_reasons_match_pods_by_owner_and_by_group() -> None:
    solo = make_pod(name="solo", gates=["kueue.x-k8s.io/admission"])
    member = make_pod(
        name="m0", gates=["kueue.x-k8s.io/admission"], labels={"kueue.x-k8s.io/pod-group-name": "gang-g0"}
    )
    other = make_pod(name="other", gates=["kueue.x-k8s.io/admission"])
    reasons = kueue_reasons_by_pod(
        [
            workload("pod-solo-1", owners=["solo"], conditions=[QUOTA_FALSE]),
            workload("gang-g0", conditions=[{**QUOTA_FALSE, "message": "gang does not fit"}]),
            workload("pod-other", owners=["other"], conditions=[ADMITTED]),
        ],
        [solo, member, other],
    )
    assert reasons == {"solo": "insufficient cpu", "m0": "gang does not fit"}


def test_summaries() -> None:
    rows = summarize_workloads(
        [workload("a", conditions=[ADMITTED]), workload("b", conditions=[QUOTA_FALSE])]
    )
    assert [(r["name"], r["admitted"], r["priority_class"]) for r in rows] == [
        ("a", True, "iris-batch"),
        ("b", False, "iris-batch"),
    ]
    pods = summarize_pods(
        [
            make_pod(name="g", gates=["kueue.x-k8s.io/admission"]),
            make_pod(name="p"),
            make_pod(name="r", phase="Running", container_state=running(), deleting=True),
        ]
    )
    assert pods == {
        "total": 3,
        "by_phase": {"Pending": 2, "Running": 1},
        "kueue_gated": 1,
        "admitted_pending": 1,
        "deleting": 1,
    }
    node = summarize_node(
        {
            "metadata": {"name": "n1", "labels": {"pool": "a"}},
            "spec": {},
            "status": {"conditions": [{"type": "Ready", "status": "True"}], "allocatable": {"cpu": "4"}},
        }
    )
    assert node["ready"] and node["allocatable"] == {"cpu": "4"} and not node["unschedulable"]
