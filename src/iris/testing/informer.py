"""A local cache of one resource kept current from an in-process subscription (like client-go's informer)."""

from __future__ import annotations

import threading
from typing import Any

from iris.testing.fake_apiserver import FakeApiServer, ResourceType, WatchEvent


class Informer:
    """``cache`` maps (namespace, name) to the latest object snapshot (read-only: never mutate)."""

    def __init__(self, server: FakeApiServer, resource: ResourceType, wakeup: threading.Event) -> None:
        self.resource = resource
        self.cache: dict[tuple[str, str], dict[str, Any]] = {}
        self._subscription = server.subscribe(resource, wakeup=wakeup)

    def sync(self) -> list[WatchEvent]:
        """Apply queued events to the cache and return them."""
        events = self._subscription.drain()
        for event in events:
            key = (event.namespace, event.name)
            if event.type == "DELETED":
                self.cache.pop(key, None)
            else:
                self.cache[key] = event.object
        return events

    def close(self) -> None:
        self._subscription.close()
