"""The device allocator: disjoint indices per attempt, aligned TPU blocks, release on demand."""

from __future__ import annotations

import threading

import pytest

from iris.cluster.worker.device_allocator import (
    DeviceAllocator,
    DevicesUnavailable,
    choose_gpus,
    choose_tpu_chips,
)


def test_gpus_are_the_lowest_free_indices() -> None:
    assert choose_gpus([3, 1, 2], 2) == (1, 2)
    assert choose_gpus([0], 2) is None
    assert choose_gpus([], 0) == ()


def test_tpu_chips_come_in_aligned_blocks_or_the_whole_host() -> None:
    chips = [0, 1, 2, 3]
    assert choose_tpu_chips(chips, [1, 2, 3], 2) == (2, 3)  # {1,2} is free but not a block
    assert choose_tpu_chips(chips, [1, 2], 2) is None
    assert choose_tpu_chips(chips, chips, 4) == (0, 1, 2, 3)
    assert choose_tpu_chips(chips, [0, 1, 2], 4) is None
    assert choose_tpu_chips(chips, [3], 1) == (3,)
    with pytest.raises(DevicesUnavailable, match="1, 2 or all 4 chips"):
        choose_tpu_chips(chips, chips, 3)


def test_two_attempts_never_share_a_gpu_and_release_frees() -> None:
    alloc = DeviceAllocator("gpu", [0, 1, 2, 3])
    a = alloc.acquire("a", 2)
    b = alloc.acquire("b", 2)
    assert set(a).isdisjoint(b) and set(a) | set(b) == {0, 1, 2, 3}
    with pytest.raises(DevicesUnavailable, match="only 0 of 4 are free"):
        alloc.acquire("c", 1)
    assert alloc.acquire("a", 2) == a  # idempotent per attempt
    assert alloc.release("a") == a
    assert alloc.release("a") == ()  # releasing twice is harmless
    assert alloc.acquire("c", 1) == (a[0],)


def test_more_than_the_worker_has_is_refused() -> None:
    with pytest.raises(DevicesUnavailable, match="this worker has 2"):
        DeviceAllocator("gpu", [0, 1]).acquire("a", 3)


def test_concurrent_acquires_hand_out_each_index_once() -> None:
    alloc = DeviceAllocator("gpu", range(64))
    got: dict[str, tuple[int, ...]] = {}
    failures: list[str] = []

    def take(uid: str) -> None:
        try:
            got[uid] = alloc.acquire(uid, 3)
        except DevicesUnavailable:
            failures.append(uid)

    threads = [threading.Thread(target=take, args=(f"a{i}",)) for i in range(30)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    flat = [i for indices in got.values() for i in indices]
    assert len(flat) == len(set(flat)) == 63  # 21 attempts of 3 fit in 64 GPUs
    assert len(failures) == 9
