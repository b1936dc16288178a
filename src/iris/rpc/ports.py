"""A free TCP port for a server that binds it a moment later (a child process, a coordinator)."""

from __future__ import annotations

import random
import socket
from pathlib import Path

_handed_out: set[int] = set()


def free_port(host: str = "127.0.0.1") -> int:
    """A port free on ``host`` now, from below the kernel's ephemeral range. A port from
    ``bind(0)`` is an ephemeral one, and until its server binds it (seconds later, for a process
    still starting) any outgoing connection on the machine may take it; below the range only
    another explicit bind can."""
    try:
        low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        low = 32768
    rng = random.Random()
    for _ in range(200):
        port = rng.randrange(max(1024, low - 12000), low)
        if port in _handed_out:
            continue
        with socket.socket() as s:
            try:
                s.bind((host, port))
            except OSError:
                continue
        _handed_out.add(port)
        return port
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])
