"""Waits for jobs to end: resolved from another thread, never left behind."""

from __future__ import annotations

import asyncio
import threading

from iris.cluster.controller.job_waiters import JobWaiters


def test_an_end_from_another_thread_wakes_only_the_waiters_of_that_job() -> None:
    waiters = JobWaiters()

    async def scenario() -> tuple[bool, bool]:
        mine, other = waiters.add("/u/a"), waiters.add("/u/b")
        ender = threading.Thread(target=waiters.ended, args=(["/u/a"],))
        ender.start()
        await asyncio.wait_for(mine, 5)
        ender.join()
        done = other.done()
        waiters.discard("/u/a", mine)
        waiters.discard("/u/b", other)
        return mine.done(), done

    assert asyncio.run(scenario()) == (True, False)
    assert waiters.count() == 0


def test_a_wait_that_timed_out_is_discarded_and_a_late_end_is_harmless() -> None:
    waiters = JobWaiters()

    async def scenario() -> None:
        ended = waiters.add("/u/a")
        try:
            await asyncio.wait_for(ended, 0.01)
        except TimeoutError:
            pass
        waiters.ended(["/u/a"])  # the job ends after the waiter gave up: nothing to wake
        waiters.discard("/u/a", ended)

    asyncio.run(scenario())
    assert waiters.count() == 0
