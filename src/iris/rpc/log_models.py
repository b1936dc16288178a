"""Wire models of the controller's log store: workers push log lines and usage, readers query them."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from iris.rpc.models import FailureInfo, WireModel

# One push carries at most this many bytes of log lines in total (the worker sends several pushes).
MAX_PUSH_BYTES = 2 * 1024 * 1024
MAX_PUSH_CHUNKS = 512


class UsageSample(WireModel):
    """One coarse point of an attempt's usage history."""

    ts: float
    cpu_seconds: float = Field(ge=0)
    rss_bytes: int = Field(ge=0)


class AttemptUsage(WireModel):
    """What an attempt's process tree used so far (sampled by its worker)."""

    cpu_seconds: float = Field(default=0.0, ge=0)
    rss_bytes: int = Field(default=0, ge=0)
    peak_rss_bytes: int = Field(default=0, ge=0)
    avg_rss_bytes: int = Field(default=0, ge=0)
    samples: int = Field(default=0, ge=0)
    # Device memory in use, where the worker can see it (GPUs).
    device_memory_bytes: int | None = Field(default=None, ge=0)
    history: list[UsageSample] = Field(default_factory=list[UsageSample], max_length=240)


class LogChunk(WireModel):
    """Lines ``[first_line, first_line + n)`` of one attempt's log, as JSON lines (``{"ts","stream","line"}``).

    ``data`` may be empty: the push then only asks how far the controller has stored (a probe).
    ``final`` says the worker will never have more lines for this attempt.
    """

    attempt_uid: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
    first_line: int = Field(ge=0)
    data: str = Field(default="", max_length=MAX_PUSH_BYTES)
    final: bool = False
    usage: AttemptUsage | None = None


class LogPushRequest(WireModel):
    worker_id: str = Field(min_length=1, max_length=128)
    chunks: list[LogChunk] = Field(max_length=MAX_PUSH_CHUNKS)


class LogAck(WireModel):
    # Lines stored so far: the next push for this attempt starts here. -1: the controller does not
    # know the attempt (never dispatched, or its job was deleted): stop sending it.
    lines: int
    final: bool = False


class LogPushResponse(WireModel):
    acks: dict[str, LogAck]


class StoredLine(WireModel):
    """A log line as read back from the store, with where it came from."""

    task_id: str
    task_index: int
    attempt_number: int
    attempt_uid: str
    # Line number within its attempt's log.
    offset: int
    ts: float
    stream: Literal["stdout", "stderr", "system"]
    line: str


class JobLogsResponse(WireModel):
    lines: list[StoredLine]
    # Pass back as ``after`` to get only newer lines (``logs -f``).
    cursor: str = ""
    # Every selected attempt has ended and all of its lines are here.
    complete: bool = False
    # Earlier lines exist that the tail / limit left out.
    truncated: bool = False


class TaskSummary(WireModel):
    """One row of ``iris job summary`` (like sacct)."""

    task_id: str
    task_index: int
    state: str
    exit_code: int | None = None
    attempts: int = 0
    worker_id: str | None = None
    started_at: float | None = None
    finished_at: float | None = None
    duration_s: float | None = None
    cpu_seconds: float | None = None
    peak_rss_bytes: int | None = None
    avg_rss_bytes: int | None = None
    memory_limit_bytes: int = 0
    cpu_limit_millicores: int = 0
    failure: FailureInfo | None = None
    history: list[UsageSample] = Field(default_factory=list[UsageSample])


class JobSummary(WireModel):
    job_id: str
    state: str
    exit_code: int | None = None
    tasks: list[TaskSummary]
