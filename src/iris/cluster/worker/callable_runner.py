"""Runs a pickled Python callable as a task: ``python -m iris.cluster.worker.callable_runner PAYLOAD``.

The payload file holds the cloudpickle of ``(fn, args, kwargs)``. Exit code 0 when the call
returns; on an exception the traceback goes to stderr and the exit code is 1 (SystemExit keeps its code).

Inside a task (``IRIS_CONTROLLER_URL``, ``IRIS_TASK_ID`` and ``IRIS_ATTEMPT_UID`` set) the runner
posts what the call returned (its cloudpickle, at most ``MAX_RESULT_BYTES``) or the traceback of
what it raised to the controller, with the task's job token, before it exits: ``Job.result()``
reads them. A result that cannot be pickled or is too big fails the task; one the controller
cannot be reached for (after a few tries) is reported in the log, and the task still succeeds.
Standard library only besides cloudpickle (no pydantic), so it runs in any image with a Python 3:
the container runtime mounts the iris package and cloudpickle read-only on its ``PYTHONPATH``.
"""

from __future__ import annotations

import base64
import json
import os
import sys
import time
import traceback
import urllib.error
import urllib.parse
import urllib.request

from iris.rpc.result_limits import MAX_TRACEBACK_CHARS, max_result_bytes

POST_TIMEOUT_S = 60.0
# Pauses between tries of a result post the controller did not answer (or answered with a 5xx).
POST_RETRY_DELAYS_S = (0.25, 0.5, 1.0, 2.0)


def _result_url() -> str | None:
    url, task = os.environ.get("IRIS_CONTROLLER_URL"), os.environ.get("IRIS_TASK_ID")
    if not url or not task or not os.environ.get("IRIS_ATTEMPT_UID"):
        return None
    return f"{url.rstrip('/')}/api/v1/tasks/{urllib.parse.quote(task.strip('/'))}:result"


def post_result(ok: bool, *, payload: bytes | None = None, tb: str | None = None) -> str | None:
    """Send the attempt's result to the controller; an error message when that failed."""
    url = _result_url()
    if url is None:
        return None  # not inside an Iris task: nobody to tell
    body: dict[str, object] = {"attempt_uid": os.environ["IRIS_ATTEMPT_UID"], "ok": ok}
    if payload is not None:
        body["payload_b64"] = base64.b64encode(payload).decode("ascii")
    if tb is not None:
        body["traceback"] = tb[-MAX_TRACEBACK_CHARS:]
    request = urllib.request.Request(
        url, data=json.dumps(body).encode(), method="POST", headers={"Content-Type": "application/json"}
    )
    if os.environ.get("IRIS_TOKEN"):
        request.add_header("Authorization", "Bearer " + os.environ["IRIS_TOKEN"])
    error = ""
    for delay in (*POST_RETRY_DELAYS_S, None):
        try:
            with urllib.request.urlopen(request, timeout=POST_TIMEOUT_S):
                return None
        except urllib.error.HTTPError as exc:
            detail = exc.read().decode("utf-8", "replace")[:500]
            error = f"the controller refused the task's result ({exc.code}): {detail}"
            if exc.code < 500:
                return error
        except OSError as exc:
            error = f"could not send the task's result to {url}: {exc}"
        if delay is not None:
            time.sleep(delay)  # a controller restarting: try again shortly
    return error


def _failed(tb: str) -> int:
    sys.stderr.write(tb)
    sys.stderr.flush()
    error = post_result(False, tb=tb)
    if error:
        print(error, file=sys.stderr)
    return 1


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m iris.cluster.worker.callable_runner PAYLOAD_FILE", file=sys.stderr)
        return 2
    fallback = os.environ.get("IRIS_RUNNER_FALLBACK_PATH")
    if fallback:  # in an image: the worker's site-packages, after the image's own
        sys.path.extend(path for path in fallback.split(":") if path)
    import cloudpickle

    try:
        with open(argv[0], "rb") as f:
            fn, args, kwargs = cloudpickle.load(f)
    except Exception:
        print("could not load the task's pickled callable:", file=sys.stderr)
        return _failed(traceback.format_exc())
    try:
        value = fn(*args, **kwargs)
    except SystemExit:
        raise
    except BaseException:
        return _failed(traceback.format_exc())
    if _result_url() is None:
        return 0
    try:
        payload = cloudpickle.dumps(value)
    except Exception:
        return _failed(traceback.format_exc())
    limit = _result_limit()
    if len(payload) > limit:
        return _failed(
            f"ResultTooLarge: the return value pickles to {len(payload)} bytes; Iris keeps at most "
            f"{limit} bytes per task (write bigger results to storage and return its path)\n"
        )
    error = post_result(True, payload=payload)
    if error:  # the work is done: the task still succeeds, and Job.result() says the value is lost
        print(f"iris: {error}; Job.result() cannot return this task's value", file=sys.stderr)
    return 0


def _result_limit() -> int:
    """This task's share of its job's results (the controller enforces the same bound)."""
    try:
        tasks = int(os.environ.get("IRIS_NUM_TASKS") or 1)
    except ValueError:
        tasks = 1
    return max_result_bytes(tasks)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
