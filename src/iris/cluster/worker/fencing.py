"""Self-fencing: a worker the controller has not reconciled for the fencing grace kills its own attempts.

The controller reaps a worker it has not reached for its grace and retries that worker's tasks
elsewhere. If the worker is alive but cut off (partitioned, or stopped with SIGSTOP and then
continued), its attempts would run on beside the retries. So the worker kills them itself a little
before the controller's grace runs out (the controller advises the fencing grace at registration;
``--fence-after`` can only make it shorter). The idea is Nomad's ``stop_on_client_after``.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from iris.cluster.runtime import KillReason

logger = logging.getLogger(__name__)


class SelfFence:
    def __init__(
        self,
        *,
        since_reconciled: Callable[[], float],
        advised_grace: Callable[[], float | None],
        kill_all: Callable[[KillReason, str], list[str]],
        configured_grace_s: float | None = None,
        interval_s: float = 0.25,
        heartbeat: Callable[[float, float | None], None] | None = None,
    ) -> None:
        """``heartbeat(reconciled_at, grace)`` (monotonic time) is told at every check, for the watchdog."""
        self._heartbeat = heartbeat
        self._since_reconciled = since_reconciled
        self._advised_grace = advised_grace
        self._kill_all = kill_all
        self._configured = configured_grace_s
        self._interval_s = interval_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="iris-fence", daemon=True)

    def grace(self) -> float | None:
        advised = self._advised_grace()
        choices = [g for g in (self._configured, advised) if g is not None]
        return min(choices) if choices else None

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def check(self) -> list[str]:
        """Kill everything if the grace has run out; the attempts killed now."""
        grace = self.grace()
        idle = self._since_reconciled()
        if self._heartbeat is not None:
            self._heartbeat(time.monotonic() - idle, grace)
        if grace is None or idle < grace:
            return []
        killed = self._kill_all(
            KillReason.FENCED,
            f"fenced: the controller has not reconciled this worker for {idle:.0f}s (grace {grace:g}s), "
            "so the task is being retried elsewhere",
        )
        if killed:
            logger.warning(
                "not reconciled for %.1fs (grace %gs): killed %d attempts", idle, grace, len(killed)
            )
        return killed

    def _loop(self) -> None:
        while not self._stop.wait(self._interval_s):
            try:
                self.check()
            except Exception:
                logger.exception("self-fencing check failed")
