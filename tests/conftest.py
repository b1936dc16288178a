"""Shared helpers: condition waits (never fixed sleeps) and free ports."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from typing import TypeVar

import iris.client.client as _iris_client

T = TypeVar("T")

# The suite runs from the repository root: packaging it as the workspace of every job submitted
# without one would unpack the repository into every task. Tests of that default set it back.
_iris_client.DEFAULT_WORKSPACE = False

# A shell without job control starts background commands with SIGINT ignored, and the ignored
# disposition survives exec into every child: tests that press Ctrl-C on a child (``iris job
# run``, ``cluster start``, ``job list --watch``) would hang on a signal nobody receives.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


def wait_until(
    condition: Callable[[], T], *, timeout: float = 30.0, interval: float = 0.05, what: str = "condition"
) -> T:
    """Poll ``condition`` until it returns something truthy; fail with ``what`` after ``timeout``."""
    deadline = time.monotonic() + timeout
    last: T | None = None
    while time.monotonic() < deadline:
        last = condition()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what} (last value: {last!r})")


# A worker finds the leftover processes it must kill by worker id and attempt uid in their
# environment. Tests use fixed attempt uids ("s1"), so the worker id is unique per test session:
# two suites run side by side on one machine must not kill each other's attempts.
TEST_WORKER_ID = f"w-test-{os.getpid()}"


# The real control plane (session-scoped; tests using it carry the real_k8s marker).
from iris.rpc.ports import free_port  # noqa: E402, F401  (tests import it from here)
from iris.testing.container_pytest import container_engine  # noqa: E402, F401
from iris.testing.control_plane.pytest_plugin import real_control_plane, real_kubelet_plane  # noqa: E402, F401
