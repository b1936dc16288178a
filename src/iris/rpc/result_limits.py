"""Bounds of a callable task's result, in a module of its own (standard library only): the callable
runner imports it inside task images, which have neither pydantic nor an Iris install."""

# A callable task's pickled return value is kept by the controller up to this size (one per task,
# the latest attempt's); a bigger one fails the task with a message saying so.
MAX_RESULT_BYTES = 1024 * 1024
# The end of a remote traceback kept with a failed callable's result.
MAX_TRACEBACK_CHARS = 32 * 1024
