"""A job name names one run: a live one is never reused, a finished one only on request."""

from __future__ import annotations

import pytest

from iris.rpc.enums import JobState, TaskState
from iris.rpc.errors import AlreadyExists
from iris.testing.round_harness import RoundHarness


def finished_job(h: RoundHarness, name: str) -> str:
    job = h.submit(name)
    h.step()
    h.fleet.finish(h.current_uid(job), exit_code=2, error="exit code 2")
    h.step()
    assert h.job_state(job) is JobState.FAILED
    return job


def test_a_live_jobs_name_cannot_be_reused_even_with_replace() -> None:
    h = RoundHarness()
    job = h.submit("train")
    h.step()
    for policy in ("error", "replace"):
        with pytest.raises(AlreadyExists) as exc:
            h.submit("train", existing_job_policy=policy)
        assert exc.value.status_code == 409
        assert f"job {job} is still running" in exc.value.message
    assert h.job_state(job) is JobState.RUNNING and len(h.task(job).attempts) == 1


def test_a_finished_job_is_replaced_only_when_asked() -> None:
    h = RoundHarness()
    job = finished_job(h, "train")
    with pytest.raises(AlreadyExists) as exc:
        h.submit("train")
    assert "already exists (failed)" in exc.value.message and "--replace" in exc.value.message
    assert h.job_state(job) is JobState.FAILED, "a refused submission leaves the old run alone"
    old_uid = h.current_uid(job)
    assert h.submit("train", existing_job_policy="keep") == job
    assert h.submit("train", existing_job_policy="replace") == job
    assert h.job_state(job) is JobState.PENDING and h.job_error(job) is None
    assert h.task(job).attempts == () and h.task(job).state is TaskState.PENDING
    assert h.events(job) == ["job_submitted"], "the old run's events went with it"
    h.step()
    assert h.current_uid(job) != old_uid
