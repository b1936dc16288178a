"""Pure decisions of the runtime: limit enforcement and how an attempt ended."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from iris.cluster.runtime.policy import (
    KillReason,
    LimitView,
    decide_enforcements,
    exit_code_of,
    final_outcome,
)
from iris.rpc.enums import TaskState


@pytest.mark.parametrize(
    ("returncode", "reason", "message", "expected"),
    [
        (0, None, None, (TaskState.SUCCEEDED, 0, None)),
        (3, None, None, (TaskState.FAILED, 3, "exited with code 3")),
        (-11, None, None, (TaskState.FAILED, 139, "killed by SIGSEGV")),
        (
            -9,
            KillReason.OOM,
            "out of memory: used 2GB, limit 1GB",
            (TaskState.FAILED, 137, "out of memory: used 2GB, limit 1GB"),
        ),
        (0, KillReason.OOM, "out of memory: x", (TaskState.FAILED, 137, "out of memory: x")),
        (-15, KillReason.TIMEOUT, "timed out after 5s", (TaskState.FAILED, 124, "timed out after 5s")),
        (-15, KillReason.STOP, "stopped", (TaskState.KILLED, 143, "stopped")),
        (0, KillReason.STOP, "stopped", (TaskState.KILLED, 0, "stopped")),
        (-9, KillReason.ZOMBIE, "zombie", (TaskState.KILLED, 137, "zombie")),
        (-15, KillReason.SHUTDOWN, "bye", (TaskState.KILLED, 143, "bye")),
    ],
)
def test_final_outcome(returncode, reason, message, expected) -> None:
    outcome = final_outcome(returncode, reason, message)
    assert (outcome.state, outcome.exit_code, outcome.error) == expected


@given(st.integers(min_value=-64, max_value=255))
def test_exit_codes_are_never_negative(returncode: int) -> None:
    assert 0 <= exit_code_of(returncode) <= 255


def view(
    uid: str = "a", limit: int = 0, deadline: float | None = None, timeout: float | None = None
) -> LimitView:
    return LimitView(uid, limit, deadline, timeout)


@pytest.mark.parametrize(
    ("views", "rss", "now", "expected"),
    [
        ([view(limit=100)], {"a": 100}, 0.0, []),
        ([view(limit=100)], {"a": 101}, 0.0, [("a", KillReason.OOM, "out of memory: used 101B, limit 100B")]),
        ([view(limit=0)], {"a": 10**12}, 0.0, []),
        ([view(deadline=10.0, timeout=2.5)], {}, 9.9, []),
        ([view(deadline=10.0, timeout=2.5)], {}, 10.0, [("a", KillReason.TIMEOUT, "timed out after 2.5s")]),
        (
            [view(limit=1000 * 1000**2, deadline=1.0, timeout=1.0)],
            {"a": 2000 * 1000**2},
            5.0,
            [("a", KillReason.OOM, "out of memory: used 2GB, limit 1GB")],
        ),
        (
            [view("a", limit=10), view("b", limit=10)],
            {"b": 11},
            0.0,
            [("b", KillReason.OOM, "out of memory: used 11B, limit 10B")],
        ),
    ],
)
def test_decide_enforcements(views, rss, now, expected) -> None:
    got = [(e.attempt_uid, e.reason, e.message) for e in decide_enforcements(views, rss, now)]
    assert got == expected


@given(
    st.lists(
        st.tuples(st.integers(0, 10**6), st.integers(0, 10**6), st.none() | st.floats(0, 100)),
        max_size=20,
    ),
    st.floats(0, 100),
)
def test_enforcement_only_hits_breaches(items, now) -> None:
    views = [view(f"u{i}", limit, deadline, 1.0) for i, (limit, _used, deadline) in enumerate(items)]
    rss = {f"u{i}": used for i, (_limit, used, _deadline) in enumerate(items)}
    decided = {e.attempt_uid: e.reason for e in decide_enforcements(views, rss, now)}
    for i, (limit, used, deadline) in enumerate(items):
        oom = 0 < limit < used
        timed_out = deadline is not None and now >= deadline
        expected = KillReason.OOM if oom else KillReason.TIMEOUT if timed_out else None
        assert decided.get(f"u{i}") is expected
