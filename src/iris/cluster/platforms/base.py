"""What every platform offers the autoscaler: create, list, describe and terminate slices.

A slice is the unit of capacity: ``num_vms`` machines, each running one worker daemon, created and
removed together. Platforms report what exists; the autoscaler decides what should exist.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Protocol, runtime_checkable

from iris.cluster.config import ScaleGroupConfig


class SliceState(StrEnum):
    CREATING = "CREATING"
    """Asked for; machines not yet running."""
    BOOTING = "BOOTING"
    """Machines running; worker daemons not all up yet."""
    READY = "READY"
    """Every worker daemon of the slice is up."""
    FAILED = "FAILED"
    """The slice cannot become (or stay) ready; it should be terminated."""


class PlatformError(Exception):
    """A platform could not do what was asked (the message says why, for the action log)."""


@dataclass(frozen=True)
class SliceHandle:
    """What ``create_slice`` returns at once; the slice boots in the background."""

    slice_id: str
    scale_group: str
    created_at: float
    worker_ids: tuple[str, ...]


@dataclass(frozen=True)
class SliceInfo:
    """A slice as the platform sees it now."""

    slice_id: str
    scale_group: str
    state: SliceState
    created_at: float
    worker_ids: tuple[str, ...] = ()
    addresses: tuple[str, ...] = ()
    error: str | None = None


@runtime_checkable
class Platform(Protocol):
    """Where slices come from. Calls are synchronous and must be quick (no waiting for boots)."""

    kind: str

    def create_slice(self, group: ScaleGroupConfig, slice_id: str, controller_url: str) -> SliceHandle:
        """Start creating a slice whose workers will register with ``controller_url``."""
        ...

    def list_slices(self) -> list[SliceInfo]:
        """Every slice this platform manages, including ones created before a controller restart."""
        ...

    def describe(self, slice_id: str) -> SliceInfo:
        """One slice; raises ``KeyError`` if the platform has no such slice."""
        ...

    def terminate(self, slice_id: str) -> None:
        """Remove a slice and its machines. Idempotent: an unknown slice is not an error."""
        ...


def worker_id_for(slice_id: str, index: int) -> str:
    """Worker ids are derived from the slice, so a slice's workers are recognisable by name."""
    return f"{slice_id}-w{index}"
