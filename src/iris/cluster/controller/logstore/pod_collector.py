"""KUBERNETES: the controller copies every task pod's log into the log store while the pod exists.

Kubernetes keeps a container's log only as long as its pod; this thread (never the control loop)
reads each live attempt's pod log past what the store holds, every ``interval_s``, and once the
pod has ended and its log is read to the end, marks the attempt's log final. A pod deleted before
that leaves the store with everything read up to its last poll.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Sequence
from typing import Any

from iris.cluster.controller import store
from iris.cluster.controller.logstore.log_store import LogStore
from iris.cluster.runtime.attempt_log import mask_secrets
from iris.cluster.types import AttemptRef, TaskTarget
from iris.rpc.enums import TERMINAL_TASK_STATES
from iris.rpc.errors import IrisError
from iris.rpc.log_models import LogChunk, LogPushRequest

logger = logging.getLogger(__name__)

_PAGE = 10_000
# Reads of a pod that keep failing (it is gone) before its log is left as it is.
_MAX_MISSES = 5


def encode_lines(lines: list[Any]) -> str:
    return "".join(
        json.dumps({"ts": line.ts, "stream": line.stream, "line": line.line}, separators=(",", ":")) + "\n"
        for line in lines
    )


class PodLogCollector:
    def __init__(self, controller: Any, logs: LogStore, *, interval_s: float = 1.0) -> None:
        self._controller = controller
        self._logs = logs
        self._interval_s = interval_s
        self._tracked: dict[str, str] = {}  # attempt uid -> task id
        self._misses: dict[str, int] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="iris-pod-logs", daemon=True)

    def start(self) -> PodLogCollector:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread.ident is not None:
            self._thread.join(timeout=5)

    def _loop(self) -> None:
        while not self._stop.wait(self._interval_s):
            try:
                self.collect_once()
            except Exception:
                logger.exception("collecting pod logs failed")

    def _resolve(self, attempt_uids: Sequence[str]) -> dict[str, tuple[str, int]]:
        with self._controller.db.read() as cur:
            rows = store.attempt_rows(cur, attempt_uids)
        return {uid: (row.task_id, row.attempt_number) for uid, row in rows.items()}

    def collect_once(self) -> None:
        with self._controller.db.read() as cur:
            live = store.unreleased_attempts(cur)
        running: set[str] = set()
        for attempt in live:
            self._tracked.setdefault(attempt.attempt_uid, attempt.task_id)
            if attempt.state not in TERMINAL_TASK_STATES:
                running.add(attempt.attempt_uid)
        self.refresh(list(self._tracked.items()), running)

    def refresh(self, attempts: list[tuple[str, str]], running: set[str] | None = None) -> None:
        """Copy what is new in these attempts' pod logs now (uid, task id); a reader calls this so
        it never waits for the next poll. ``running``: attempts known not to have ended."""
        backend = self._controller.backend
        if backend is None:
            return
        if running is None:
            with self._controller.db.read() as cur:
                rows = store.attempt_rows(cur, [uid for uid, _ in attempts])
            running = {uid for uid, row in rows.items() if row.state not in TERMINAL_TASK_STATES}
        for uid, task_id in attempts:
            if self._stop.is_set():
                return
            meta = self._logs.attempt(uid)
            if meta is not None and meta.final:
                self._forget(uid)
                continue
            offset = meta.lines if meta is not None else 0
            try:
                ref = AttemptRef(TaskTarget(attempt_uid=uid), uid, task_id)
                page = backend.attempt_logs(ref, offset=offset, limit=_PAGE)
            except IrisError as exc:
                logger.debug("cannot read the log of attempt %s yet: %s", uid, exc)
                self._misses[uid] = self._misses.get(uid, 0) + 1
                if self._misses[uid] >= _MAX_MISSES:
                    self._forget(uid)
                continue
            # The backend's note that a pod is gone is not part of the task's log.
            lines = [
                line
                for line in page.lines
                if not (line.stream == "system" and "no longer exists" in line.line)
            ]
            masks = self._masks(task_id)
            if masks:
                lines = [line.model_copy(update={"line": mask_secrets(line.line, masks)}) for line in lines]
            # A pod not created yet also reads as complete: only an ended attempt's log is final.
            final = page.complete and len(page.lines) < _PAGE and uid not in running
            if lines or final:
                chunk = LogChunk(attempt_uid=uid, first_line=offset, data=encode_lines(lines), final=final)
                self._logs.push(LogPushRequest(worker_id="kubernetes", chunks=[chunk]), self._resolve)
            if final:
                self._forget(uid)

    def _masks(self, task_id: str) -> list[str]:
        try:
            return self._controller.secret_masks(task_id.rsplit("/", 1)[0])
        except IrisError:
            return []

    def _forget(self, uid: str) -> None:
        self._tracked.pop(uid, None)
        self._misses.pop(uid, None)
