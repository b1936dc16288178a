"""An in-memory platform for tests: slices boot after a delay on an injected clock, or fail on demand."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

from iris.cluster.config import ScaleGroupConfig
from iris.cluster.platforms.base import PlatformError, SliceHandle, SliceInfo, SliceState, worker_id_for


@dataclass
class _Behaviour:
    boot_delay_s: float = 0.0
    fail_boots: int = 0
    hang_boots: int = 0
    create_errors: int = 0


@dataclass
class _FakeSlice:
    info: SliceInfo
    ready_at: float | None
    fail_at: float | None = None
    error: str | None = None


class FakePlatform:
    """Slices that become READY ``boot_delay_s`` after creation (by ``clock``), unless told otherwise.

    ``inject(group, ...)`` makes the next creates of a group fail to boot, hang forever (for boot
    timeouts) or raise at create time; ``kill_slice`` fails a running slice.
    """

    kind = "fake"

    def __init__(self, clock: Callable[[], float] = time.time, boot_delay_s: float = 0.0) -> None:
        self._clock = clock
        self._default_delay = boot_delay_s
        self._behaviour: dict[str, _Behaviour] = {}
        self._slices: dict[str, _FakeSlice] = {}
        self._lock = threading.Lock()
        self.created: list[str] = []
        self.terminated: list[str] = []

    def inject(
        self,
        group: str,
        *,
        boot_delay_s: float | None = None,
        fail_boots: int = 0,
        hang_boots: int = 0,
        create_errors: int = 0,
    ) -> None:
        """Change how the next slices of ``group`` behave (counts add up; a delay replaces the default)."""
        with self._lock:
            behaviour = self._behaviour.setdefault(group, _Behaviour(self._default_delay))
            if boot_delay_s is not None:
                behaviour.boot_delay_s = boot_delay_s
            behaviour.fail_boots += fail_boots
            behaviour.hang_boots += hang_boots
            behaviour.create_errors += create_errors

    def create_slice(self, group: ScaleGroupConfig, slice_id: str, controller_url: str) -> SliceHandle:
        with self._lock:
            if slice_id in self._slices:
                raise PlatformError(f"slice {slice_id} already exists")
            behaviour = self._behaviour.setdefault(group.name, _Behaviour(self._default_delay))
            if behaviour.create_errors > 0:
                behaviour.create_errors -= 1
                raise PlatformError(f"injected create failure for group {group.name}")
            now = self._clock()
            workers = tuple(worker_id_for(slice_id, i) for i in range(group.num_vms))
            info = SliceInfo(
                slice_id=slice_id,
                scale_group=group.name,
                state=SliceState.BOOTING,
                created_at=now,
                worker_ids=workers,
                addresses=tuple(f"{w}.fake:0" for w in workers),
            )
            fake = _FakeSlice(info, ready_at=now + behaviour.boot_delay_s)
            if behaviour.fail_boots > 0:
                behaviour.fail_boots -= 1
                fake.ready_at, fake.fail_at, fake.error = (
                    None,
                    now + behaviour.boot_delay_s,
                    "injected boot failure",
                )
            elif behaviour.hang_boots > 0:
                behaviour.hang_boots -= 1
                fake.ready_at = None
            self._slices[slice_id] = fake
            self.created.append(slice_id)
            return SliceHandle(slice_id, group.name, now, workers)

    def list_slices(self) -> list[SliceInfo]:
        with self._lock:
            return [self._current(s) for s in self._slices.values()]

    def describe(self, slice_id: str) -> SliceInfo:
        with self._lock:
            return self._current(self._slices[slice_id])

    def terminate(self, slice_id: str) -> None:
        with self._lock:
            if self._slices.pop(slice_id, None) is not None:
                self.terminated.append(slice_id)

    def kill_slice(self, slice_id: str, error: str = "machine lost") -> None:
        """Make a slice FAILED from now on (a preempted or crashed machine)."""
        with self._lock:
            fake = self._slices[slice_id]
            fake.fail_at, fake.error = self._clock(), error

    def _current(self, fake: _FakeSlice) -> SliceInfo:
        now = self._clock()
        if fake.fail_at is not None and now >= fake.fail_at:
            return replace(fake.info, state=SliceState.FAILED, error=fake.error)
        if fake.ready_at is not None and now >= fake.ready_at:
            return replace(fake.info, state=SliceState.READY)
        return fake.info
