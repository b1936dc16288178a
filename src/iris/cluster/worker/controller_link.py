"""The worker's two calls to the controller: register (and re-register), and nudge.

Registration repeats with backoff while the controller is down and again whenever the controller
has not reconciled this worker for ``reregister_after_s`` (e.g. it restarted and forgot us).
The registration answer carries the secret the controller signs its calls to this worker with.
A nudge ("reconcile me now") follows an attempt state change the controller has not yet seen.
One nudge asks for one reconcile, which reports every change made before it: after a nudge,
later changes wait for that reconcile (or ``NUDGE_REPEAT_S``, should it not come) instead of
nudging again, so a burst of hundreds of task ends costs a nudge per reconcile, not per end.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from iris.rpc.errors import IrisError, NotFound, Unavailable
from iris.rpc.http import HttpClient
from iris.rpc.models import RegisterRequest, RegisterResponse
from iris.rpc.signing import RequestVerifier

logger = logging.getLogger(__name__)

HTTP_TIMEOUT_S = 3.0
_BACKOFF_START_S = 0.1
_BACKOFF_MAX_S = 5.0
# After a nudge, changes wait this long for the reconcile it asked for before nudging again.
NUDGE_REPEAT_S = 0.5


class ControllerLink:
    def __init__(
        self,
        controller_url: str,
        worker_id: str,
        register_request: Callable[[], RegisterRequest],
        reregister_after_s: float = 5.0,
        token: str | None = None,
        verifier: RequestVerifier | None = None,
    ) -> None:
        self._verifier = verifier
        self._base = controller_url.rstrip("/")
        self._token = token
        self._worker_id = worker_id
        self._register_request = register_request
        self._reregister_after_s = reregister_after_s
        self._stopping = threading.Event()
        self._register_now = threading.Event()
        self._nudge_wanted = threading.Event()
        self._lock = threading.Lock()
        self._last_contact = time.monotonic()
        # Only a reconcile proves the controller can reach us (a registration does not).
        self._last_reconciled = time.monotonic()
        self.advised_fence_s: float | None = None
        # Told (synchronously) whenever a reconcile marks contact: the worker rewrites its heartbeat.
        self.on_reached: Callable[[], None] | None = None
        # Attempt state changes are numbered; a reconcile answer covers every change numbered before it.
        self._change_seq = 0
        self._reported_seq = 0
        # When the last nudge was answered, until a reconcile comes (None: none is awaited).
        self._nudged_at: float | None = None
        self._reconciles = 0
        self.registrations = 0
        self._threads = [
            threading.Thread(target=self._register_loop, name="iris-register", daemon=True),
            threading.Thread(target=self._nudge_loop, name="iris-nudge", daemon=True),
        ]

    def start(self) -> None:
        for thread in self._threads:
            thread.start()

    def stop(self) -> None:
        """Stop registering and nudging. Does not wait: a call in flight must not delay the shutdown."""
        self._stopping.set()
        self._register_now.set()
        self._nudge_wanted.set()

    def state_changed(self) -> None:
        """An attempt changed state (any thread; cheap). While a nudge awaits its reconcile the
        nudge loop is not woken: that reconcile, or the repeat after NUDGE_REPEAT_S, covers it."""
        with self._lock:
            self._change_seq += 1
            awaiting = self._nudged_at is not None
        if not awaiting:
            self._nudge_wanted.set()

    def change_mark(self) -> int:
        """The number of the latest state change. Take it just before reading attempt states for a
        reconcile answer, and pass it to ``reconciled`` once the answer is built."""
        with self._lock:
            return self._change_seq

    def since_reconciled(self) -> float:
        with self._lock:
            return time.monotonic() - self._last_reconciled

    def resume_lease(self, reconciled_at: float, fence_after_s: float | None) -> None:
        """Attempts adopted from a previous run of this worker (containers) keep the fencing lease
        they ran under: the time (monotonic) of that run's last reconcile and the grace it was
        advised, until this run is reconciled or advised one itself."""
        with self._lock:
            self._last_reconciled = min(self._last_reconciled, reconciled_at)
            if self.advised_fence_s is None:
                self.advised_fence_s = fence_after_s

    def reached(self, *, renew_lease: bool = True) -> None:
        """An authenticated reconcile has arrived: the controller can reach us now. Marked before
        the reconcile starts anything, so a fence check (or the watchdog, through ``on_reached``)
        running beside the reconcile never sees the previous, older mark with a fresh attempt.
        A reconcile that does not renew the fencing lease (the controller's previous call went
        unanswered) still counts as contact for re-registration."""
        with self._lock:
            self._last_contact = time.monotonic()
            if renew_lease:
                self._last_reconciled = self._last_contact
        if self.on_reached is not None:
            self.on_reached()

    def reconciled(self, covered_seq: int) -> None:
        """The answer is built. The fencing lease still runs from the request's arrival (``reached``):
        the controller bounds that by when its call ended, and the answer may never reach it."""
        with self._lock:
            self._last_contact = time.monotonic()
            self._reported_seq = max(self._reported_seq, covered_seq)
            self._nudged_at = None
            self._reconciles += 1
            unseen = self._change_seq > self._reported_seq
        if unseen:
            self._nudge_wanted.set()  # changes made while this answer was built
        if self.on_reached is not None:
            self.on_reached()

    # ------------------------------------------------------------------ registration

    def _register_loop(self) -> None:
        backoff = _BACKOFF_START_S
        need_register = True
        with HttpClient(self._base, token=self._token, timeout_s=HTTP_TIMEOUT_S) as client:
            while not self._stopping.is_set():
                if need_register:
                    if self._register(client):
                        need_register = False
                        backoff = _BACKOFF_START_S
                    else:
                        self._stopping.wait(backoff)
                        backoff = min(backoff * 2, _BACKOFF_MAX_S)
                    continue
                with self._lock:
                    wait_s = self._last_contact + self._reregister_after_s - time.monotonic()
                if wait_s <= 0:
                    logger.info("not reconciled for %.1fs: registering again", self._reregister_after_s)
                    need_register = True
                    continue
                if self._register_now.wait(wait_s):
                    self._register_now.clear()
                    need_register = not self._stopping.is_set()

    def _register(self, client: HttpClient) -> bool:
        request = self._register_request()
        try:
            answer = client.request("POST", "/api/v1/workers/register", json_body=request)
        except Unavailable as exc:
            logger.debug("controller unreachable for registration: %s", exc.message)
            return False
        except IrisError as exc:
            logger.warning(
                "controller refused registration (HTTP %d): %s", exc.status_code, exc.message[:500]
            )
            return False
        try:
            response = RegisterResponse.model_validate(answer)
        except ValueError:
            logger.warning("controller sent an unreadable registration answer: %s", str(answer)[:500])
            return False
        if not response.accepted:
            logger.warning("controller did not accept the registration of %s", self._worker_id)
            return False
        if response.worker_id != self._worker_id:
            logger.warning(
                "controller registered us as %s, but this worker is %s", response.worker_id, self._worker_id
            )
        if self._verifier is not None:
            if response.rpc_secret is None:
                logger.warning("the controller sent no signing secret: this worker will refuse its calls")
            else:
                self._verifier.set_secret(bytes.fromhex(response.rpc_secret))
        with self._lock:
            self._last_contact = time.monotonic()
            if self.registrations == 0:
                # The fencing grace runs from the first registration, not from the worker's start
                # (its start-up checks may take longer than a short grace). Later registrations do
                # not reset it: a worker that can register but is not reconciled must still fence.
                self._last_reconciled = self._last_contact
        self.advised_fence_s = response.fence_after_s
        self.registrations += 1
        logger.info("registered with %s as %s", self._base, self._worker_id)
        return True

    # ------------------------------------------------------------------ nudges

    def _nudge_loop(self) -> None:
        with HttpClient(self._base, token=self._token, timeout_s=HTTP_TIMEOUT_S) as client:
            while not self._stopping.is_set():
                self._nudge_wanted.wait()
                self._nudge_wanted.clear()
                if self._stopping.is_set():
                    return
                with self._lock:
                    unseen = self._change_seq > self._reported_seq
                    awaited = self._nudged_at
                if not unseen:
                    continue
                left = NUDGE_REPEAT_S - (time.monotonic() - awaited) if awaited is not None else 0.0
                if left > 0:
                    # The reconcile the last nudge asked for will report these changes too: wait
                    # for it (``reconciled`` sets the event) or for the repeat interval, then look again.
                    self._nudge_wanted.wait(left)
                    self._nudge_wanted.set()
                    continue
                with self._lock:
                    reconciles = self._reconciles
                if self._nudge(client):
                    with self._lock:
                        if self._reconciles == reconciles:  # (the reconcile may beat the nudge's answer)
                            self._nudged_at = time.monotonic()
                else:
                    self._stopping.wait(_BACKOFF_START_S)  # do not spin on a controller that is down

    def _nudge(self, client: HttpClient) -> bool:
        try:
            client.request("POST", f"/api/v1/workers/{self._worker_id}/nudge")
        except NotFound:
            logger.info("controller does not know this worker: registering again")
            self._register_now.set()
            return False
        except IrisError:
            return False
        return True
