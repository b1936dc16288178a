"""Bounds of a callable task's result, in a module of its own (standard library only): the callable
runner imports it inside task images, which have neither pydantic nor an Iris install."""

# A callable task's pickled return value is kept by the controller up to this size (one per task,
# the latest attempt's); a bigger one fails the task with a message saying so.
MAX_RESULT_BYTES = 1024 * 1024
# The end of a remote traceback kept with a failed callable's result.
MAX_TRACEBACK_CHARS = 32 * 1024
# All of one job's results together (a job may have 100,000 tasks): each task gets its share of
# this, never more than MAX_RESULT_BYTES and never less than MIN_RESULT_BYTES (a small value fits).
MAX_JOB_RESULT_BYTES = 256 * 1024 * 1024
MIN_RESULT_BYTES = 2 * 1024


def max_result_bytes(tasks: int) -> int:
    """How big one task's result (or kept traceback) may be in a job of ``tasks`` tasks."""
    return max(MIN_RESULT_BYTES, min(MAX_RESULT_BYTES, MAX_JOB_RESULT_BYTES // max(1, tasks)))
