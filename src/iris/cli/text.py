"""Plain text helpers for the CLI: user text made safe to show, times and durations.

Rich-free, so commands that only stream text (``iris job logs``) start without loading it.
"""

from __future__ import annotations

import re
import time
from datetime import UTC, datetime

# CSI (ESC [ ... final), OSC (ESC ] ... BEL or ESC \), and the other two-byte escapes.
_ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?|\x1b[@-_]?")
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
# What a line break becomes in one-line text.
NEWLINE_MARK = " ↵ "


def clean(text: object, *, one_line: bool = True) -> str:
    """User text made safe to show: no escape sequences, visible controls, valid Unicode.

    ``\\r\\n`` and lone ``\\r`` count as line breaks; with ``one_line`` every break becomes ``↵``.
    """
    s = str(text)
    # Undecodable bytes (surrogate escapes from argv, lone surrogates) become U+FFFD.
    s = s.encode("utf-8", "surrogateescape").decode("utf-8", "replace") if _has_surrogate(s) else s
    s = _ANSI.sub("", s).replace("\r\n", "\n").replace("\r", "\n").replace("\t", " ")
    s = _CONTROL.sub("\N{REPLACEMENT CHARACTER}", s)
    if one_line:
        s = NEWLINE_MARK.join(part for part in s.split("\n")) if "\n" in s else s
    return s


def _has_surrogate(s: str) -> bool:
    return any("\ud800" <= ch <= "\udfff" for ch in s)


def strip_ansi(text: str) -> str:
    """``text`` without its escape sequences (colours, cursor moves, titles)."""
    return _ANSI.sub("", text)


# A colour/style escape (SGR: ESC [ digits m), or one control character other than tab and newline.
_SGR_OR_CONTROL = re.compile(r"\x1b\[[0-9;:]*m|[\x00-\x08\x0b-\x1f\x7f-\x9f]")
_NAMED_CONTROLS = {"\r": "\\r", "\x1b": "\\x1b"}


def terminal_safe(text: str, *, color: bool = True) -> str:
    """Job output made harmless for a terminal: colour escapes kept (``color``) or dropped, every
    other escape sequence and control character shown as text (``ESC`` as ``\\x1b``, ``\\r`` as
    ``\\r``), so a task cannot set the title, write the clipboard, plant hyperlinks, move the cursor
    or hide text behind a carriage return. A trailing ``\\r`` (a CRLF line) is dropped."""
    text = safe_line(text).removesuffix("\r")

    def shown(match: re.Match[str]) -> str:
        found = match.group()
        if len(found) > 1:
            return found if color else ""
        return _NAMED_CONTROLS.get(found) or f"\\x{ord(found):02x}"

    return _SGR_OR_CONTROL.sub(shown, text)


def safe_line(text: str) -> str:
    """A log line for a stream as is (escapes kept for colour), only made encodable."""
    if _has_surrogate(text):
        return text.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
    return text


def iso_time(ts: float) -> str:
    """``2026-12-01T09:22:30.123Z``."""
    moment = datetime.fromtimestamp(ts, tz=UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def ago(ts: float | None) -> str:
    if ts is None:
        return "-"
    delta = max(0.0, time.time() - ts)
    if delta < 60:
        return f"{delta:.0f}s ago"
    if delta < 3600:
        return f"{delta / 60:.0f}m ago"
    if delta < 86400:
        return f"{delta / 3600:.1f}h ago"
    return f"{delta / 86400:.1f}d ago"


def duration(start: float | None, end: float | None) -> str:
    if start is None:
        return "-"
    seconds = (end or time.time()) - start
    if seconds < 60:
        return f"{seconds:.1f}s"
    if seconds < 3600:
        return f"{seconds / 60:.1f}m"
    return f"{seconds / 3600:.1f}h"


_SINCE_PART = re.compile(r"(\d+(?:\.\d+)?)([smhd])")
_SINCE_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_since(text: str, now: float) -> float:
    """``30s``, ``5m``, ``1h30m``, ``2d`` before ``now``, or an ISO time (local unless it has an offset)."""
    value = text.strip().lower()
    parts = _SINCE_PART.findall(value)
    if parts and "".join(n + u for n, u in parts) == value:
        return now - sum(float(n) * _SINCE_UNITS[u] for n, u in parts)
    try:
        return datetime.fromisoformat(text.strip()).timestamp()
    except ValueError:
        raise ValueError(
            f"expected a duration like 5m, 1h or 2d, or a time like 2026-01-31T12:00, got {text!r}"
        ) from None
