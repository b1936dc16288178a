"""Hosts an operator manages by hand: Iris never creates or removes machines, it only reports them."""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterable, Sequence

from iris.cluster.config import ScaleGroupConfig
from iris.cluster.platforms.base import PlatformError, SliceHandle, SliceInfo, SliceState

MANUAL_GROUP = "manual"


class ManualPlatform:
    """One single-machine "slice" per configured host; READY once a worker from that host registered.

    ``registered_workers`` returns ``(worker_id, address)`` of the workers the controller knows;
    a host entry ``h`` matches any address on ``h``, an entry ``h:p`` only that exact address.
    """

    kind = "manual"

    def __init__(
        self,
        hosts: Sequence[str],
        registered_workers: Callable[[], Iterable[tuple[str, str]]] = lambda: (),
        clock: Callable[[], float] = time.time,
    ) -> None:
        if not hosts:
            raise ValueError("the manual platform needs at least one host")
        self._hosts = list(dict.fromkeys(hosts))
        self._registered = registered_workers
        self._since = clock()

    def create_slice(self, group: ScaleGroupConfig, slice_id: str, controller_url: str) -> SliceHandle:
        raise PlatformError(
            f"the manual platform cannot create machines; start a worker daemon on a host yourself "
            f"(python -m iris.cluster.worker --controller {controller_url})"
        )

    def list_slices(self) -> list[SliceInfo]:
        workers = list(self._registered())
        return [self._slice(host, workers) for host in self._hosts]

    def describe(self, slice_id: str) -> SliceInfo:
        for host in self._hosts:
            if manual_slice_id(host) == slice_id:
                return self._slice(host, list(self._registered()))
        raise KeyError(slice_id)

    def terminate(self, slice_id: str) -> None:
        raise PlatformError(
            f"the manual platform cannot stop machines; stop the worker of {slice_id} by hand"
        )

    def _slice(self, host: str, workers: list[tuple[str, str]]) -> SliceInfo:
        matching = [(wid, addr) for wid, addr in workers if _matches(host, addr)]
        return SliceInfo(
            slice_id=manual_slice_id(host),
            scale_group=MANUAL_GROUP,
            state=SliceState.READY if matching else SliceState.BOOTING,
            created_at=self._since,
            worker_ids=tuple(wid for wid, _ in matching),
            addresses=tuple(addr for _, addr in matching),
            error=None if matching else f"no worker has registered from {host} yet",
        )


def manual_slice_id(host: str) -> str:
    return "manual-" + re.sub(r"[^a-zA-Z0-9.-]+", "-", host).strip("-")


def _host_of(address: str) -> str:
    address = address.split("://", 1)[-1]
    if address.startswith("["):  # [ipv6]:port
        return address[1:].split("]", 1)[0]
    return address.rsplit(":", 1)[0] if address.count(":") == 1 else address


def _matches(entry: str, address: str) -> bool:
    if entry.count(":") == 1 or entry.startswith("["):
        return address.split("://", 1)[-1] == entry
    return _host_of(address) == entry
