"""Container logs, written by the node agent and served by its kubelet API (``containerLogs``).

Each container of each pod (by pod uid) has one file of lines ``<RFC3339Nano timestamp> <text>``,
as the kubelet keeps them, so ``timestamps``, ``sinceSeconds`` and ``tailLines`` can be honoured.
"""

from __future__ import annotations

import datetime as dt
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path


def rfc3339_nano(moment: dt.datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%f") + "000Z"


def _parse_timestamp(text: str) -> dt.datetime | None:
    try:
        return dt.datetime.strptime(text[:26], "%Y-%m-%dT%H:%M:%S.%f").replace(tzinfo=dt.UTC)
    except ValueError:
        return None


@dataclass(frozen=True)
class LogQuery:
    timestamps: bool = False
    tail_lines: int | None = None
    since: dt.datetime | None = None
    limit_bytes: int | None = None


class ContainerLog:
    """One container's log file plus a condition readers wait on while it grows."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        self._file = path.open("a", encoding="utf-8")
        self._cond = threading.Condition()
        self._finished = False

    def write_line(self, text: str, when: dt.datetime | None = None) -> None:
        stamp = rfc3339_nano(when or dt.datetime.now(dt.UTC))
        with self._cond:
            if self._finished:
                return
            self._file.write(f"{stamp} {text.rstrip(chr(10))}\n")
            self._file.flush()
            self._cond.notify_all()

    def finish(self) -> None:
        """The container ended: followers drain what is left and stop."""
        with self._cond:
            if not self._finished:
                self._finished = True
                self._file.close()
            self._cond.notify_all()

    def wait_for_growth(self, offset: int, timeout: float) -> None:
        with self._cond:
            if not self._finished and self.path.stat().st_size <= offset:
                self._cond.wait(timeout)

    def read_lines(self, query: LogQuery) -> tuple[list[str], int]:
        """Existing lines after filtering, and the byte offset reached (for following)."""
        data = self.path.read_bytes()
        lines = data.decode("utf-8", errors="replace").splitlines()
        lines = [line for line in lines if _keep(line, query.since)]
        if query.tail_lines is not None:
            lines = lines[-query.tail_lines :] if query.tail_lines > 0 else []
        return [_render(line, query.timestamps) for line in lines], len(data)

    def follow(self, offset: int, query: LogQuery, stopped: threading.Event) -> Iterator[str]:
        """Lines appended after ``offset`` until the container finishes or ``stopped`` is set."""
        pending = b""
        while not stopped.is_set():
            finished = self._finished
            with self.path.open("rb") as handle:
                handle.seek(offset)
                chunk = handle.read()
            offset += len(chunk)
            pending += chunk
            *complete, pending = pending.split(b"\n")
            for raw in complete:
                line = raw.decode("utf-8", errors="replace")
                if _keep(line, query.since):
                    yield _render(line, query.timestamps)
            if finished and not chunk:
                return
            if not chunk:
                self.wait_for_growth(offset, timeout=0.5)


def _keep(line: str, since: dt.datetime | None) -> bool:
    if since is None:
        return True
    stamp = _parse_timestamp(line.split(" ", 1)[0])
    return stamp is None or stamp >= since


def _render(line: str, timestamps: bool) -> str:
    return line if timestamps else line.split(" ", 1)[1] if " " in line else ""


class PodLogs:
    """Registry of container logs under one directory, keyed by pod uid and container name."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._lock = threading.Lock()
        self._logs: dict[tuple[str, str], ContainerLog] = {}

    def open(self, pod_uid: str, container: str) -> ContainerLog:
        with self._lock:
            log = self._logs.get((pod_uid, container))
            if log is None:
                log = ContainerLog(self.root / pod_uid / f"{container}.log")
                self._logs[(pod_uid, container)] = log
            return log

    def get(self, pod_uid: str, container: str) -> ContainerLog | None:
        with self._lock:
            return self._logs.get((pod_uid, container))

    def finish_all(self) -> None:
        with self._lock:
            logs = list(self._logs.values())
        for log in logs:
            log.finish()
