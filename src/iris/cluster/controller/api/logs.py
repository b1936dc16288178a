"""HTTP routes of the log store: workers push logs and usage; users read logs, summaries and failures.

``POST /api/v1/logs:push`` (worker role) is served on the API's thread pool, never on the
control loop; it touches the controller database only to learn the owners of attempts it has
not seen before (one read for all of a push's new attempts). Reads come from the store alone, whether or not the worker still exists.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from functools import partial
from typing import TYPE_CHECKING, Literal

from fastapi import APIRouter, Query, Request
from fastapi.responses import Response, StreamingResponse
from pydantic import ValidationError
from starlette.concurrency import run_in_threadpool

from iris.cluster.controller import store, views
from iris.cluster.controller.api import common as access
from iris.cluster.controller.api.common import who
from iris.cluster.controller.auth import Principal
from iris.cluster.controller.failure import FAILED_STATES, TAIL_LINES, diagnose
from iris.cluster.controller.logstore import LogQuery, LogStore, format_cursor, parse_cursor, run_query
from iris.cluster.controller.logstore.index import AttemptLog
from iris.cluster.controller.logstore.query import iter_text, select_attempts
from iris.cluster.controller.logstore.segment import RawLine
from iris.rpc.enums import TERMINAL_JOB_STATES, TERMINAL_TASK_STATES, TaskState
from iris.rpc.errors import InvalidArgument, IrisError, NotFound
from iris.rpc.log_models import (
    MAX_PUSH_BYTES,
    JobLogsResponse,
    JobSummary,
    LogPushRequest,
    LogPushResponse,
    TaskSummary,
)
from iris.rpc.models import JobDetail, LogLine, LogsResponse

if TYPE_CHECKING:
    from iris.cluster.controller.controller import Controller

# The whole push body: the lines themselves, JSON-escaped, plus the envelope.
MAX_PUSH_BODY = 3 * MAX_PUSH_BYTES
# Lines shipped within this long after an attempt ended may still be on their way.
SHIPPING_GRACE_S = 5.0
MAX_DIAGNOSED = 200


def _job_id(path: str) -> str:
    path = path.strip("/")
    if not path:
        raise InvalidArgument("missing job id")
    return "/" + path


def _decode(raw: RawLine) -> LogLine:
    entry = raw.decode()
    return LogLine.model_construct(
        ts=float(entry.get("ts", 0.0)), stream=entry.get("stream", "stdout"), line=str(entry.get("line", ""))
    )


def attempt_done(row: store.AttemptRow | None, meta: AttemptLog | None, now: float) -> bool:
    """No more lines will arrive for this attempt: its worker said so, or it ended and cannot say."""
    if meta is not None and meta.final:
        return True
    if row is None:
        return meta is None
    if row.state not in TERMINAL_TASK_STATES:
        return False
    finished = row.finished_at
    # A pod's log is copied by the controller's collector, which marks it final; until then (or the
    # grace) a follower keeps reading, as it does for a worker still shipping its last lines.
    return finished is None or now - finished > SHIPPING_GRACE_S


def settle(
    controller: Controller, logs: LogStore, attempts: list[tuple[str, str]], budget_s: float = 2.0
) -> None:
    """Make a read as fresh as the machine's own log: on Kubernetes copy the pods' logs now; on
    workers wait (briefly) for the last lines of attempts that have just ended."""
    attempts = [(uid, task_id) for uid, task_id in attempts if not _final(logs, uid)]
    if not attempts:
        return
    collector = controller.pod_logs
    if collector is not None:
        collector.refresh(attempts)
        return
    deadline = time.monotonic() + budget_s
    while time.monotonic() < deadline:
        with controller.db.read() as cur:
            rows = store.attempt_rows(cur, [uid for uid, _ in attempts])
        now = time.time()
        attempts = [
            (uid, task_id)
            for uid, task_id in attempts
            if not _final(logs, uid)
            and (row := rows.get(uid)) is not None
            and row.state in TERMINAL_TASK_STATES
            and not attempt_done(row, None, now)  # ended a moment ago, on a worker that is still there
        ]
        if not attempts:
            return
        logs.wait_for_lines(min(0.2, max(0.0, deadline - time.monotonic())))


def _final(logs: LogStore, uid: str) -> bool:
    meta = logs.attempt(uid)
    return meta is not None and meta.final


def log_tail_text(logs: LogStore, attempt_uid: str, n: int = TAIL_LINES) -> list[str]:
    """The last ``n`` output lines (no system lines) of an attempt."""
    if logs.attempt(attempt_uid) is None:
        return []
    from iris.cluster.controller.logstore.query import tail_lines

    return tail_lines(logs.segment(attempt_uid), n)


def attach_failures(controller: Controller, detail: JobDetail) -> JobDetail:
    """Fill ``failure`` of every task that ended badly (kind, numbers, exception, log tail)."""
    logs: LogStore = controller.logs
    failed = [t for t in detail.tasks if t.state in FAILED_STATES][:MAX_DIAGNOSED]
    if not failed:
        return detail
    uids = [t.current_attempt_uid for t in failed if t.current_attempt_uid]
    settle(
        controller,
        logs,
        [(t.current_attempt_uid, t.task_id) for t in failed if t.current_attempt_uid],
        1.0,
    )
    usage = logs.usage(uids)
    preemptors: dict[str, str] = {}
    if any(t.state is TaskState.PREEMPTED or t.preemption_count for t in failed):
        with controller.db.read() as cur:
            preemptors = store.last_preemptors(cur, detail.job_id)
    limit = detail.spec.resources.memory_bytes
    for task in failed:
        uid = task.current_attempt_uid
        tail = log_tail_text(logs, uid) if uid else []
        by = preemptors.get(task.task_id, "").removeprefix("preempted by ") or None
        task.failure = diagnose(
            task,
            memory_limit_bytes=limit,
            usage=usage.get(uid or ""),
            log_tail=tail,
            preempted_by=by,
            timeout_s=detail.spec.timeout_s,
        )
    return detail


def job_summary(controller: Controller, detail: JobDetail) -> JobSummary:
    logs: LogStore = controller.logs
    detail = attach_failures(controller, detail)
    uids = [t.current_attempt_uid for t in detail.tasks if t.current_attempt_uid]
    usage = logs.usage(uids)
    res = detail.spec.resources
    now = time.time()
    rows: list[TaskSummary] = []
    for t in detail.tasks:
        u = usage.get(t.current_attempt_uid or "")
        end = t.finished_at or (now if t.started_at else None)
        rows.append(
            TaskSummary(
                task_id=t.task_id,
                task_index=t.task_index,
                state=t.state.value,
                exit_code=t.exit_code,
                attempts=t.attempt_count,
                worker_id=t.worker_id
                or next((a.worker_id for a in reversed(t.attempts) if a.worker_id), None),
                started_at=t.started_at,
                finished_at=t.finished_at,
                duration_s=(end - t.started_at) if (end and t.started_at) else None,
                cpu_seconds=u.cpu_seconds if u else None,
                peak_rss_bytes=(t.failure.peak_rss_bytes if t.failure and t.failure.peak_rss_bytes else None)
                or (u.peak_rss_bytes if u else None),
                avg_rss_bytes=u.avg_rss_bytes if u else None,
                memory_limit_bytes=res.memory_bytes,
                cpu_limit_millicores=res.cpu_millicores,
                failure=t.failure,
                history=u.history if u else [],
            )
        )
    return JobSummary(job_id=detail.job_id, state=detail.state.value, exit_code=detail.exit_code, tasks=rows)


def _parse_attempt(value: str | None) -> int | Literal["all"] | None:
    if value is None or value == "":
        return None
    if value == "all":
        return "all"
    if value.isdigit():
        return int(value)
    raise InvalidArgument(f"attempt must be a number or 'all', got {value!r}")


def add_log_routes(
    app: APIRouter,
    controller: Controller,
    *,
    who: Callable[[], Principal],
    owned_job: Callable[[str], str],
    owned_task: Callable[[str], str],
    fallback_task_logs: Callable[..., LogsResponse] | None = None,
) -> None:
    """Register the routes; call before the generic ``/api/v1/jobs/{path}`` route (first match wins)."""
    logs: LogStore = controller.logs

    def resolve(attempt_uids: Sequence[str]) -> dict[str, tuple[str, int]]:
        with controller.db.read() as cur:
            rows = store.attempt_rows(cur, attempt_uids)
        return {uid: (row.task_id, row.attempt_number) for uid, row in rows.items()}

    @app.post("/api/v1/logs:push", response_model=LogPushResponse)
    async def push_logs(request: Request) -> Response:
        """Workers push attempts' log lines (and usage); the answer says how far each is stored."""
        who().may_act_as_worker()
        declared = request.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > MAX_PUSH_BODY:
            raise InvalidArgument(f"a log push is at most {MAX_PUSH_BODY} bytes")
        body = bytearray()
        async for part in request.stream():
            body += part
            if len(body) > MAX_PUSH_BODY:
                raise InvalidArgument(f"a log push is at most {MAX_PUSH_BODY} bytes")
        try:
            push = LogPushRequest.model_validate_json(bytes(body))
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first.get("loc", ()))
            raise InvalidArgument(f"invalid log push: {where}: {first['msg']}") from None
        if sum(len(c.data) for c in push.chunks) > MAX_PUSH_BYTES:
            raise InvalidArgument(f"a log push carries at most {MAX_PUSH_BYTES} bytes of lines")
        answer = await run_in_threadpool(logs.push, push, resolve)
        return Response(answer.model_dump_json(), media_type="application/json")

    @app.get("/api/v1/tasks/{task_path:path}:logs", response_model=LogsResponse)
    def task_logs(
        task_path: str,
        offset: int = Query(default=0, ge=0),
        limit: int = Query(default=1000, ge=1, le=10_000),
        attempt: str | None = None,
        tail: int | None = Query(default=None, ge=0, le=100_000),
        before: int | None = Query(default=None, ge=0),
    ) -> Response:
        """One attempt's log (the current one unless ``attempt`` names a uid): lines
        ``[offset, offset+limit)``, or the last ``tail`` lines (before line ``before``)."""
        task_id = owned_task(_job_id(task_path))
        with controller.db.read() as cur:
            task = store.get_task(cur, task_id)
            if task is None:
                raise NotFound(f"task {task_id} does not exist")
            uid = attempt or task.current_attempt_uid
            row = store.get_attempt(cur, uid) if uid else None
        if uid is None:
            page = LogsResponse(lines=[], next_offset=0, complete=task.state is not TaskState.PENDING)
            return Response(page.model_dump_json(), media_type="application/json")
        if row is None or row.task_id != task_id:
            raise NotFound(f"attempt {uid} of task {task_id} does not exist")
        settle(controller, logs, [(uid, task_id)])
        meta = logs.attempt(uid)
        if meta is None and fallback_task_logs is not None and not attempt_done(row, None, time.time()):
            try:  # nothing shipped yet: ask the machine running it
                page = fallback_task_logs(task_id, uid, offset=offset, limit=limit)
                return Response(page.model_dump_json(), media_type="application/json")
            except IrisError:
                pass
        segment = logs.segment(uid) if meta is not None else None
        if segment is None:
            raw: list[RawLine] = []
            total = 0
        elif tail is not None:
            raw = segment.tail(tail, before)
            total = segment.lines
        else:
            raw = segment.read(offset, limit)
            total = segment.lines
        start = (
            raw[0].offset if raw else (offset if tail is None else (before if before is not None else total))
        )
        next_offset = raw[-1].offset + 1 if raw else (offset if tail is None else total)
        done = attempt_done(row, meta, time.time())
        page = LogsResponse(
            lines=[_decode(r) for r in raw],
            next_offset=next_offset,
            complete=done and next_offset >= total,
            start_offset=start,
            total_lines=total,
        )
        return Response(page.model_dump_json(), media_type="application/json")

    @app.get("/api/v1/jobs/{job_path:path}:logs", response_model=JobLogsResponse)
    def job_logs(
        job_path: str,
        task: list[int] = Query(default=[]),
        attempt: str | None = None,
        since: float | None = None,
        until: float | None = None,
        grep: str | None = Query(default=None, max_length=256),
        ignore_case: bool = False,
        tail: int | None = Query(default=None, ge=0, le=100_000),
        limit: int = Query(default=10_000, ge=1, le=100_000),
        include_system: bool = False,
        include_children: bool = False,
        after: str | None = Query(default=None, max_length=1_000_000),
        wait_s: float = Query(default=0.0, ge=0, le=10),
        download: bool = False,
        timestamps: bool = False,
    ) -> Response:
        """A job's logs from the store: every task's current attempt, interleaved by time.

        ``tail`` (per task), ``since``/``until`` (unix seconds), ``grep`` (a regular expression),
        ``task`` (repeatable index), ``attempt`` (number or ``all``), ``include_children``.
        ``after`` (the previous answer's ``cursor``) returns only newer lines, waiting up to
        ``wait_s`` for one; ``download`` returns the whole selection as text.
        """
        job_id = owned_job(_job_id(job_path))
        query = LogQuery(
            tasks=frozenset(task) if task else None,
            attempt=_parse_attempt(attempt),
            since=since,
            until=until,
            grep=grep or None,
            ignore_case=ignore_case,
            tail=tail,
            limit=limit,
            include_system=include_system,
            after=parse_cursor(after),
        )
        query.compiled()  # a bad pattern is a 400 before any reading
        deadline = time.monotonic() + wait_s
        settled = False
        while True:
            with controller.db.read() as cur:
                job = store.get_job(cur, job_id)
                if job is None:
                    raise NotFound(f"job {job_id} does not exist")
                tasks = store.tasks_in_tree(cur, job_id, include_children=include_children)
                jobs_done = job.state in TERMINAL_JOB_STATES
                if include_children and jobs_done:
                    jobs_done = all(t.state in TERMINAL_TASK_STATES for t in tasks)
            current = {t.task_id: t.current_attempt_uid for t in tasks if t.current_attempt_uid}
            if not settled:
                settled = True
                wanted = [
                    (uid, task_id)
                    for task_id, uid in current.items()
                    if query.tasks is None or _index(task_id) in query.tasks
                ]
                settle(controller, logs, wanted[:MAX_DIAGNOSED])
            chosen = select_attempts(
                logs.attempts_of_job(job_id, include_children=include_children), query, current
            )
            if chosen:  # a replaced run's attempts (gone from the database) keep their logs: not shown
                with controller.db.read() as cur:
                    live = store.attempt_rows(cur, [a.attempt_uid for a in chosen])
                chosen = [a for a in chosen if a.attempt_uid in live]
            if download:
                multi = len({a.task_id for a in chosen}) > 1
                name = job_id.strip("/").replace("/", "_") or "job"
                return StreamingResponse(
                    iter_text(logs, chosen, query, prefix=multi, timestamps=timestamps),
                    media_type="text/plain; charset=utf-8",
                    headers={"content-disposition": f'attachment; filename="{name}.log"'},
                )
            result = run_query(logs, chosen, query)
            complete = False
            if jobs_done:
                chosen_uids = {a.attempt_uid for a in chosen}
                # Current attempts that have not shipped anything (yet): they may still.
                silent = [
                    uid
                    for task_id, uid in current.items()
                    if uid not in chosen_uids
                    and (query.tasks is None or _index(task_id) in query.tasks)
                    and query.attempt in (None, "all")
                    and logs.attempt(uid) is None
                ]
                with controller.db.read() as cur:
                    rows = store.attempt_rows(cur, [*chosen_uids, *silent])
                now = time.time()
                held = logs.stored_lines([a.attempt_uid for a in chosen])
                complete = all(
                    attempt_done(rows.get(a.attempt_uid), a, now)
                    and result.cursor.get(a.attempt_uid, 0) >= held[a.attempt_uid]
                    for a in chosen
                ) and all(attempt_done(rows.get(uid), None, now) for uid in silent)
            if result.lines or complete or query.after is None or time.monotonic() >= deadline:
                break
            logs.wait_for_lines(min(0.5, max(0.0, deadline - time.monotonic())))
        cursor = dict(query.after or {})
        cursor.update(result.cursor)
        answer = JobLogsResponse(
            lines=result.lines, cursor=format_cursor(cursor), complete=complete, truncated=result.truncated
        )
        return Response(answer.model_dump_json(), media_type="application/json")

    @app.get("/api/v1/jobs/{job_path:path}:summary", response_model=JobSummary)
    def summary(job_path: str) -> JobSummary:
        """Per task: state, exit, attempts, duration, CPU time, peak memory against the limit, worker."""
        job_id = owned_job(_job_id(job_path))
        with controller.db.read() as cur:
            row = store.get_job(cur, job_id)
            if row is None:
                raise NotFound(f"job {job_id} does not exist")
            detail = views.job_detail(cur, row)
        return job_summary(controller, detail)


def _index(task_id: str) -> int:
    tail = task_id.rsplit("/", 1)[-1]
    return int(tail) if tail.isdigit() else -1


def add_routes(router: APIRouter, controller: Controller) -> None:
    """The log routes; add them before the jobs routes (their ``/api/v1/jobs/{path}`` matches anything)."""

    def live_task_logs(task_id: str, uid: str, *, offset: int, limit: int) -> LogsResponse:
        """A page read from the machine running the attempt (before its worker shipped anything)."""
        ref = controller.attempt_ref(task_id, uid)
        return controller.require_backend().attempt_logs(ref, offset=offset, limit=limit)

    add_log_routes(
        router,
        controller,
        who=who,
        owned_job=partial(access.owned_job, controller),
        owned_task=partial(access.owned_task, controller),
        fallback_task_logs=live_task_logs,
    )
