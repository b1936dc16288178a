"""Process-wide logging for the controller and worker daemons: text or one JSON object per line.

A log line about one job, task, attempt or worker names it with ``extra=``::

    log.info("task %s failed", task_id, extra={"job_id": job_id, "task_id": task_id})

The JSON format writes ``ts``, ``level``, ``logger``, ``msg`` and those ids as keys; the text
format appends them as ``key=value``. ``--log-file`` rotates (20 MB x 5 by default). When a flag is
not given, ``IRIS_LOG_FORMAT``, ``IRIS_LOG_FILE`` and ``IRIS_LOG_LEVEL`` decide, so a launcher
(systemd, a local cluster) can set the format of every process it starts.
"""

from __future__ import annotations

import json
import logging
import logging.handlers
import os
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Literal

LogFormat = Literal["text", "json"]
LOG_FORMATS: tuple[LogFormat, ...] = ("text", "json")

# Ids a line can be about; passed with ``extra=`` and written as their own keys.
CONTEXT_FIELDS = ("job_id", "task_id", "attempt_uid", "worker_id")

DEFAULT_MAX_BYTES = 20 * 1024 * 1024
DEFAULT_BACKUPS = 5

# Libraries that log every request at INFO.
QUIET_LOGGERS = ("httpx", "httpcore")


def _iso_utc(created: float) -> str:
    seconds = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(created))
    return f"{seconds}.{int(created % 1 * 1000):03d}Z"


class JsonFormatter(logging.Formatter):
    """One JSON object per line: ts (UTC, ISO 8601), level, logger, msg, the context ids, exc."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, object] = {
            "ts": _iso_utc(record.created),
            "level": record.levelname,
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for key in CONTEXT_FIELDS:
            value = getattr(record, key, None)
            if value is not None:
                entry[key] = value
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        elif record.exc_text:
            entry["exc"] = record.exc_text
        return json.dumps(entry, ensure_ascii=False, default=str)


class TextFormatter(logging.Formatter):
    """``2026-01-02 10:11:12,345 INFO iris.controller: job /u/x succeeded job_id=/u/x``."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s: %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        text = super().format(record)
        context = " ".join(
            f"{key}={getattr(record, key)}"
            for key in CONTEXT_FIELDS
            if getattr(record, key, None) is not None
        )
        if not context:
            return text
        first, newline, rest = text.partition("\n")  # keep a traceback below the context
        return f"{first} {context}{newline}{rest}"


def make_formatter(log_format: LogFormat) -> logging.Formatter:
    if log_format == "json":
        return JsonFormatter()
    if log_format == "text":
        return TextFormatter()
    raise ValueError(f"unknown log format {log_format!r}: use one of {', '.join(LOG_FORMATS)}")


def configure_logging(
    log_format: str | None = None,
    log_file: str | Path | None = None,
    *,
    level: str | int | None = None,
    max_bytes: int = DEFAULT_MAX_BYTES,
    backups: int = DEFAULT_BACKUPS,
    environ: Mapping[str, str] | None = None,
) -> logging.Handler:
    """Replace the root logger's handlers with one stderr or rotating-file handler; returns it.

    Arguments left as None fall back to ``IRIS_LOG_FORMAT`` / ``IRIS_LOG_FILE`` / ``IRIS_LOG_LEVEL``,
    then to text on stderr at INFO. Raises ValueError for an unknown format or level.
    """
    env = os.environ if environ is None else environ
    chosen_format = (log_format or env.get("IRIS_LOG_FORMAT") or "text").lower()
    formatter = make_formatter(chosen_format)  # type: ignore[arg-type]
    chosen_file = log_file or env.get("IRIS_LOG_FILE") or None
    chosen_level = level if level is not None else env.get("IRIS_LOG_LEVEL", "INFO")
    numeric_level = (
        logging.getLevelNamesMapping().get(chosen_level.upper())
        if isinstance(chosen_level, str)
        else chosen_level
    )
    if not isinstance(numeric_level, int):
        raise ValueError(f"unknown log level {chosen_level!r}")
    handler: logging.Handler
    if chosen_file:
        path = Path(chosen_file).expanduser()
        path.parent.mkdir(parents=True, exist_ok=True)
        handler = logging.handlers.RotatingFileHandler(
            path, maxBytes=max_bytes, backupCount=backups, encoding="utf-8"
        )
    else:
        handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(formatter)
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
        old.close()
    root.addHandler(handler)
    root.setLevel(numeric_level)
    for name in QUIET_LOGGERS:
        logging.getLogger(name).setLevel(logging.WARNING)
    return handler
