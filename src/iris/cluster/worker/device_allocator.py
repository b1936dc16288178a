"""Which device indices an attempt gets: a pure choice over the free set, and the holder of who has what.

GPUs are interchangeable: an attempt gets the lowest free indices. TPU chips are wired in a
grid, and libtpu only accepts a process whose chips form a block of the host's grid, so a TPU
attempt gets an aligned block (chips 0-1 or 2-3 for two of four chips) or the whole host.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping, Sequence

from iris.cluster.runtime.subprocess_runtime import PreparationError

TPU_SUBSET_SIZES = (1, 2, 4, 8)


class DevicesUnavailable(PreparationError):
    """An attempt asked for devices this worker cannot give it now; one sentence for the user."""


def choose_gpus(free: Iterable[int], count: int) -> tuple[int, ...] | None:
    """The ``count`` lowest free indices, or None when fewer are free."""
    ordered = sorted(free)
    return tuple(ordered[:count]) if count <= len(ordered) else None


def choose_tpu_chips(all_chips: Sequence[int], free: Iterable[int], count: int) -> tuple[int, ...] | None:
    """The first aligned, fully free block of ``count`` chips (or every chip); None if there is none.

    Raises DevicesUnavailable for a size libtpu cannot run as one process on part of a host.
    """
    chips = sorted(all_chips)
    free_set = set(free)
    if count == len(chips):
        return tuple(chips) if free_set >= set(chips) else None
    if count not in TPU_SUBSET_SIZES or count > len(chips) or len(chips) % count:
        sizes = ", ".join(str(n) for n in TPU_SUBSET_SIZES if n < len(chips) and len(chips) % n == 0)
        raise DevicesUnavailable(
            f"a TPU task takes {sizes + ' or ' if sizes else ''}all {len(chips)} chips of a host, not {count}"
        )
    for start in range(0, len(chips), count):
        block = chips[start : start + count]
        if free_set >= set(block):
            return tuple(block)
    return None


class DeviceAllocator:
    """Device indices held per attempt uid; thread-safe. Never hands one index to two attempts."""

    def __init__(self, kind: str, indices: Sequence[int]) -> None:
        self.kind = kind
        self.indices = tuple(sorted(indices))
        self._held: dict[str, tuple[int, ...]] = {}
        self._lock = threading.Lock()

    def acquire(self, attempt_uid: str, count: int) -> tuple[int, ...]:
        """Indices for ``attempt_uid`` (the same ones again if it already holds some)."""
        with self._lock:
            held = self._held.get(attempt_uid)
            if held is not None:
                return held
            taken = {i for indices in self._held.values() for i in indices}
            free = [i for i in self.indices if i not in taken]
            if count > len(self.indices):
                raise DevicesUnavailable(
                    f"the attempt needs {count} {self.kind} devices but this worker has {len(self.indices)}"
                )
            if self.kind == "tpu":
                chosen = choose_tpu_chips(self.indices, free, count)
            else:
                chosen = choose_gpus(free, count)
            if chosen is None:
                holders = ", ".join(sorted(self._held)) or "nobody"
                raise DevicesUnavailable(
                    f"the attempt needs {count} {self.kind} devices but only {len(free)} of "
                    f"{len(self.indices)} are free (held by {holders})"
                )
            self._held[attempt_uid] = chosen
            return chosen

    def release(self, attempt_uid: str) -> tuple[int, ...]:
        """Free what ``attempt_uid`` holds (nothing if it holds nothing); returns the freed indices."""
        with self._lock:
            return self._held.pop(attempt_uid, ())

    def held(self) -> Mapping[str, tuple[int, ...]]:
        with self._lock:
            return dict(self._held)
