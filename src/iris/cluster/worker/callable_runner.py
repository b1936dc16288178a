"""Runs a pickled Python callable as a task: ``python -m iris.cluster.worker.callable_runner PAYLOAD``.

The payload file holds the cloudpickle of ``(fn, args, kwargs)``. Exit code 0 when the call
returns; on an exception the traceback goes to stderr and the exit code is 1 (SystemExit keeps its code).
"""

from __future__ import annotations

import sys
import traceback


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m iris.cluster.worker.callable_runner PAYLOAD_FILE", file=sys.stderr)
        return 2
    import cloudpickle

    try:
        with open(argv[0], "rb") as f:
            fn, args, kwargs = cloudpickle.load(f)
    except Exception:
        print("could not load the task's pickled callable:", file=sys.stderr)
        traceback.print_exc()
        return 1
    try:
        fn(*args, **kwargs)
    except SystemExit:
        raise
    except BaseException:
        traceback.print_exc()
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
