"""One thread that waits on every attempt's output pipes and exit (pidfd) at once.

No per-attempt thread and no polling: the kernel wakes this thread when a pipe has data or
a process exits, so starting or finishing an attempt costs a few syscalls.
"""

from __future__ import annotations

import logging
import os
import select
import threading
from collections import deque
from collections.abc import Callable

logger = logging.getLogger(__name__)


class IoLoop:
    def __init__(self, name: str = "iris-io") -> None:
        self._epoll = select.epoll()
        self._handlers: dict[int, Callable[[int], None]] = {}
        self._lock = threading.Lock()
        self._calls: deque[Callable[[], None]] = deque()
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)
        self._epoll.register(self._wake_r, select.EPOLLIN)
        self._stopping = False
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def watch(self, fd: int, handler: Callable[[int], None]) -> None:
        """Call ``handler(fd)`` on the loop thread whenever fd is readable (or hung up). Any thread."""
        with self._lock:
            self._handlers[fd] = handler
            self._epoll.register(fd, select.EPOLLIN)

    def forget(self, fd: int) -> None:
        """Stop watching fd (the caller then closes it). Loop thread only."""
        with self._lock:
            self._handlers.pop(fd, None)
            try:
                self._epoll.unregister(fd)
            except (OSError, ValueError):
                pass

    def call_soon(self, fn: Callable[[], None]) -> None:
        """Run fn on the loop thread. Any thread."""
        self._calls.append(fn)
        self._wake()

    def stop(self) -> None:
        self._stopping = True
        self._wake()
        self._thread.join(timeout=5)
        self._epoll.close()
        os.close(self._wake_r)
        os.close(self._wake_w)

    def _wake(self) -> None:
        try:
            os.write(self._wake_w, b"x")
        except (BlockingIOError, OSError):
            pass  # already awake, or stopped

    def _run(self) -> None:
        while not self._stopping:
            try:
                events = self._epoll.poll()
            except InterruptedError:
                continue
            for fd, _mask in events:
                if fd == self._wake_r:
                    try:
                        while os.read(self._wake_r, 4096):
                            pass
                    except BlockingIOError:
                        pass
                    continue
                handler = self._handlers.get(fd)
                if handler is not None:
                    try:
                        handler(fd)
                    except Exception:
                        logger.exception("io loop handler failed")
            while self._calls:
                self._safely(self._calls.popleft())

    @staticmethod
    def _safely(fn: Callable[[], None]) -> None:
        try:
            fn()
        except Exception:
            logger.exception("io loop handler failed")
