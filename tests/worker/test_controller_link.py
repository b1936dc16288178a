"""ControllerLink against a real HTTP stub: registration, coalesced nudges, nudges skipped once reported."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from tests.worker.harness import ControllerStub, wait_until

from iris.cluster.worker.controller_link import NUDGE_REPEAT_S, ControllerLink
from iris.rpc.models import RegisterRequest, ResourceSpec


def request() -> RegisterRequest:
    return RegisterRequest(worker_id="w-link", address="127.0.0.1:1", capacity=ResourceSpec())


@pytest.fixture
def stub() -> Iterator[ControllerStub]:
    controller = ControllerStub().start()
    yield controller
    controller.stop()


def test_many_changes_coalesce_into_few_nudges_never_two_at_once(stub: ControllerStub) -> None:
    stub.nudge_delay_s = 0.3
    link = ControllerLink(stub.url, "w-link", request, reregister_after_s=60)
    link.start()
    try:
        wait_until(lambda: stub.registrations, what="registration")
        for _ in range(50):
            link.state_changed()
            time.sleep(0.005)
        # No reconcile comes: the changes after the first nudge ask again once NUDGE_REPEAT_S is over.
        wait_until(lambda: len(stub.nudges) >= 2, what="the first nudge and the repeat")
        time.sleep(0.8)  # give a wrongly uncoalesced link the chance to send more
        assert 2 <= len(stub.nudges) <= 3
        assert stub.max_concurrent_nudges == 1
    finally:
        link.stop()


def test_after_a_nudge_later_changes_wait_for_its_reconcile_then_nudge_once(stub: ControllerStub) -> None:
    link = ControllerLink(stub.url, "w-link", request, reregister_after_s=60)
    link.start()
    try:
        wait_until(lambda: stub.registrations, what="registration")
        link.state_changed()
        wait_until(lambda: len(stub.nudges) == 1, what="the first nudge")
        for _ in range(20):  # a burst while the reconcile that nudge asked for has not come
            link.state_changed()
        time.sleep(NUDGE_REPEAT_S / 2)
        assert len(stub.nudges) == 1
        covered = link.change_mark() - 5  # the reconcile's answer covers all but the last changes
        link.reconciled(covered)
        wait_until(lambda: len(stub.nudges) == 2, what="one nudge for what that reconcile did not report")
        link.reconciled(link.change_mark())
        time.sleep(NUDGE_REPEAT_S * 1.5)
        assert len(stub.nudges) == 2
    finally:
        link.stop()


def test_changes_already_reported_by_a_reconcile_send_no_nudge(stub: ControllerStub) -> None:
    stub.nudge_delay_s = 0.4
    link = ControllerLink(stub.url, "w-link", request, reregister_after_s=60)
    link.start()
    try:
        wait_until(lambda: stub.registrations, what="registration")
        link.state_changed()
        wait_until(lambda: stub.max_concurrent_nudges == 1, what="first nudge in flight")
        # While that nudge is in flight another change happens, and a reconcile answer reports it.
        link.state_changed()
        link.reconciled(link.change_mark())
        wait_until(lambda: len(stub.nudges) == 1, what="first nudge answered")
        time.sleep(0.6)
        assert len(stub.nudges) == 1
    finally:
        link.stop()


def test_silence_from_the_controller_leads_to_registering_again(stub: ControllerStub) -> None:
    link = ControllerLink(stub.url, "w-link", request, reregister_after_s=0.3)
    link.start()
    try:
        wait_until(lambda: len(stub.registrations) >= 3, timeout=5, what="repeated registrations")
    finally:
        link.stop()


def test_the_fencing_clock_starts_at_the_first_registration_not_at_start_up() -> None:
    """A worker whose registration takes longer than the fencing grace must not count that time
    as silence: its first attempt would be fenced (by the watchdog) the moment it started."""
    slow = ControllerStub(fence_after_s=0.5, register_delay_s=1.5).start()
    link = ControllerLink(slow.url, "w-link", request, reregister_after_s=60)
    reached: list[float] = []
    link.on_reached = lambda: reached.append(link.since_reconciled())
    link.start()
    try:
        wait_until(lambda: link.advised_fence_s is not None, timeout=10, what="the advised grace")
        assert link.since_reconciled() < 0.5
        link.reached()  # a reconcile arriving tells the heartbeat at once, before it starts anything
        assert len(reached) == 1 and reached[0] < 0.1
    finally:
        link.stop()
        slow.stop()
