"""Requests waiting for jobs to end (``GET /api/v1/jobs/{id}:wait``), woken from the control loop.

A waiting client holds one request open instead of polling the job every few tens of
milliseconds: each wait is a future on the API's event loop (no thread is held), resolved by the
commit that ends its job. A waiter registers before it reads the job's state, so a job that ends
in between is never missed.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterable


class JobWaiters:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._waiting: dict[str, list[tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]]] = {}

    def add(self, job_id: str) -> asyncio.Future[None]:
        """A future resolved once ``job_id`` ends (call on the event loop that will await it)."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[None] = loop.create_future()
        with self._lock:
            self._waiting.setdefault(job_id, []).append((loop, future))
        return future

    def discard(self, job_id: str, future: asyncio.Future[None]) -> None:
        with self._lock:
            waiting = self._waiting.get(job_id)
            if waiting is None:
                return
            waiting[:] = [(loop, f) for loop, f in waiting if f is not future]
            if not waiting:
                del self._waiting[job_id]

    def ended(self, job_ids: Iterable[str]) -> None:
        """These jobs have ended (any thread): wake everything waiting for them."""
        with self._lock:
            if not self._waiting:
                return
            woken = [w for job_id in job_ids for w in self._waiting.pop(job_id, ())]
        for loop, future in woken:
            loop.call_soon_threadsafe(_resolve, future)

    def count(self) -> int:
        with self._lock:
            return sum(len(w) for w in self._waiting.values())


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)
