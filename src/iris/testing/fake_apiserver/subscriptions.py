"""In-process change feed: the store pushes every committed change to matching subscriptions."""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from iris.testing.fake_apiserver.resources import ResourceType


@dataclass(frozen=True)
class WatchEvent:
    """One committed change. ``object`` and ``previous`` are shared snapshots: never mutate them."""

    type: str  # ADDED | MODIFIED | DELETED
    resource: ResourceType
    object: dict[str, Any]
    previous: dict[str, Any] | None
    resource_version: int

    @property
    def namespace(self) -> str:
        return (self.object.get("metadata") or {}).get("namespace") or ""

    @property
    def name(self) -> str:
        return (self.object.get("metadata") or {}).get("name") or ""


_CLOSED = object()


class Subscription:
    """A queue of events for one resource type (optionally one namespace).

    Created by ``ObjectStore.subscribe``; the store pushes under its lock, the consumer pulls from
    its own thread, so a slow consumer never blocks writers. ``wakeup`` (optional) is set on every
    push, so one thread can wait on several subscriptions. With ``max_backlog`` set, a consumer
    that falls that far behind is closed (``overflowed``), as the real API server drops slow watchers.
    """

    def __init__(
        self,
        resource: ResourceType,
        namespace: str | None,
        max_backlog: int | None,
        on_close: Callable[[Subscription], None],
        wakeup: threading.Event | None = None,
    ) -> None:
        self.resource = resource
        self.namespace = namespace
        self.max_backlog = max_backlog
        self.overflowed = False
        self._closed = False
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._on_close = on_close
        self._wakeup = wakeup

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def backlog(self) -> int:
        return self._queue.qsize()

    def accepts(self, event: WatchEvent) -> bool:
        return self.namespace is None or event.namespace == self.namespace

    def push(self, event: WatchEvent) -> None:
        if self._closed:
            return
        if self.max_backlog is not None and self._queue.qsize() >= self.max_backlog:
            self.overflowed = True
            self.close()
            return
        self._queue.put(event)
        if self._wakeup is not None:
            self._wakeup.set()

    def get(self, timeout: float | None = None) -> WatchEvent | None:
        """Next event, or None on timeout or once the subscription is closed."""
        try:
            item = self._queue.get(timeout=timeout)
        except queue.Empty:
            return None
        if item is _CLOSED:
            self._queue.put(_CLOSED)  # keep later get() calls returning at once
            return None
        return item

    def drain(self) -> list[WatchEvent]:
        """All events queued right now, without waiting."""
        events: list[WatchEvent] = []
        while True:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                return events
            if item is _CLOSED:
                self._queue.put(_CLOSED)
                return events
            events.append(item)

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._queue.put(_CLOSED)
            self._on_close(self)
