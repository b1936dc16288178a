"""A lock per content hash, so concurrent attempts build (or download) a thing once.

An ``flock`` on ``<name>.lock``: it excludes other threads (each call opens its own file
description) and other processes sharing the directory alike. Waiting polls, so a waiter whose
attempt is stopped gives up promptly instead of blocking until the build finishes.
"""

from __future__ import annotations

import fcntl
import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path


class Cancelled(Exception):
    """The attempt waiting for (or doing) the work was stopped."""


@contextmanager
def hash_lock(
    path: Path, cancelled: Callable[[], bool] = lambda: False, poll_s: float = 0.05
) -> Iterator[None]:
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if cancelled():
                    raise Cancelled() from None
                time.sleep(poll_s)
        yield
    finally:
        os.close(fd)  # closing the description releases the lock
