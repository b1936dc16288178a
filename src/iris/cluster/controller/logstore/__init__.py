"""The controller's durable store of task logs and usage (see log_store.py)."""

from iris.cluster.controller.logstore.index import AttemptLog
from iris.cluster.controller.logstore.log_store import LogStore
from iris.cluster.controller.logstore.query import LogQuery, format_cursor, parse_cursor, run_query

__all__ = ["AttemptLog", "LogQuery", "LogStore", "format_cursor", "parse_cursor", "run_query"]
