"""Running ``iris`` as a user would, against a test cluster."""

from __future__ import annotations

import os
import queue
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import IO

from iris.client.local_cluster import LocalCluster

IRIS = [sys.executable, "-m", "iris.cli.main"]


def iris_env(cluster: LocalCluster, **extra: str) -> dict[str, str]:
    return {**os.environ, "IRIS_CONTROLLER_URL": cluster.url, "COLUMNS": "200", **extra}


def run_iris(
    cluster: LocalCluster, cwd: Path, *args: str, timeout: float = 180
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*IRIS, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=cwd,
        env=iris_env(cluster),
        stdin=subprocess.DEVNULL,
    )


class LineReader:
    """Reads a stream on a thread, so a test can wait for a line with a deadline."""

    def __init__(self, stream: IO[str]) -> None:
        self.lines: list[str] = []
        self._queue: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._pump, args=(stream,), daemon=True).start()

    def _pump(self, stream: IO[str]) -> None:
        for line in stream:
            self._queue.put(line.rstrip("\n"))
        self._queue.put(None)

    def wait_for(self, fragment: str | tuple[str, ...], timeout: float = 30.0) -> str:
        """The first line holding ``fragment`` (or any one of several)."""
        fragments = (fragment,) if isinstance(fragment, str) else fragment
        for line in self.lines:
            if any(f in line for f in fragments):
                return line
        deadline = time.monotonic() + timeout
        while (remaining := deadline - time.monotonic()) > 0:
            try:
                line = self._queue.get(timeout=remaining)
            except queue.Empty:
                break
            if line is None:
                break
            self.lines.append(line)
            if any(f in line for f in fragments):
                return line
        raise AssertionError(f"no line containing {fragment!r}; got {self.lines!r}")

    def rest(self, timeout: float = 30.0) -> list[str]:
        """Every line until the stream closes."""
        deadline = time.monotonic() + timeout
        while (remaining := deadline - time.monotonic()) > 0:
            line = self._queue.get(timeout=remaining)
            if line is None:
                return self.lines
            self.lines.append(line)
        raise AssertionError(f"the stream did not close; got {self.lines!r}")
