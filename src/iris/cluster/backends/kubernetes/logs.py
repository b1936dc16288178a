"""Pod log lines (``timestamps=true``) -> Iris log lines (pure).

Kubernetes merges stdout and stderr of a container into one stream, so every line is
reported as ``stdout``.
"""

from __future__ import annotations

import re
from datetime import datetime

from iris.rpc.models import LogLine

_STAMPED = re.compile(r"^(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2})(\.\d+)?(Z|[+-]\d{2}:\d{2}) ?(.*)$", re.DOTALL)


def parse_log_line(raw: str, *, task_index: int | None = None, fallback_ts: float = 0.0) -> LogLine:
    """Split ``2024-05-01T10:00:00.123456789Z hello`` into its time and text."""
    raw = raw.rstrip("\r\n")
    match = _STAMPED.match(raw)
    if match is None:
        return LogLine(ts=fallback_ts, stream="stdout", line=raw, task_index=task_index)
    seconds, fraction, zone, text = match.groups()
    fraction = (fraction or ".0")[:7]  # Python parses at most microseconds
    zone = "+00:00" if zone == "Z" else zone
    try:
        ts = datetime.fromisoformat(f"{seconds}{fraction}{zone}").timestamp()
    except ValueError:
        return LogLine(ts=fallback_ts, stream="stdout", line=raw, task_index=task_index)
    return LogLine(ts=ts, stream="stdout", line=text, task_index=task_index)
