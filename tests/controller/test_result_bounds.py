"""One job's callable results together stay bounded: a job may have 100,000 tasks, and 1 MiB each
would fill the controller's disk (and ``GET :results`` its memory). Each task gets its share."""

from __future__ import annotations

import base64

import pytest

from iris.cluster.controller import results
from iris.rpc.errors import InvalidArgument
from iris.rpc.models import TaskResult
from iris.rpc.result_limits import MAX_RESULT_BYTES, MIN_RESULT_BYTES, max_result_bytes
from iris.testing.round_harness import RoundHarness


def _running_task(replicas: int) -> tuple[RoundHarness, str, str]:
    h = RoundHarness(workers=1, cpu=replicas)
    job = h.submit("fan-out", replicas=replicas, cpu=1)
    h.step(2)
    return h, f"{job}/0", h.current_uid(job)


def _post(h: RoundHarness, task_id: str, uid: str, payload: bytes) -> None:
    result = TaskResult(attempt_uid=uid, ok=True, payload_b64=base64.b64encode(payload).decode())
    with h.controller.db.transaction() as cur:
        results.save(cur, task_id, result)


def test_a_task_of_a_big_job_gets_its_share_of_the_jobs_result_bound() -> None:
    h, task_id, uid = _running_task(1000)
    share = max_result_bytes(1000)
    assert MIN_RESULT_BYTES < share < MAX_RESULT_BYTES // 3
    with pytest.raises(InvalidArgument, match=f"over the {share}-byte limit per task"):
        _post(h, task_id, uid, b"x" * (MAX_RESULT_BYTES // 2))  # fine alone, not 1,000 times
    _post(h, task_id, uid, b"x" * share)


def test_a_small_job_keeps_a_mebibyte_per_task_and_a_huge_one_a_small_value() -> None:
    assert max_result_bytes(1) == max_result_bytes(256) == MAX_RESULT_BYTES
    assert 2 * MIN_RESULT_BYTES > max_result_bytes(100_000) >= MIN_RESULT_BYTES == max_result_bytes(10**6)
