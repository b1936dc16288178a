"""How a task attempt runs on a worker: the subprocess runtime (process group per attempt)."""

from iris.cluster.runtime.policy import KillReason
from iris.cluster.runtime.subprocess_runtime import SubprocessRuntime

__all__ = ["KillReason", "SubprocessRuntime"]
