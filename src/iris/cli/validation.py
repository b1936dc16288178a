"""A pydantic validation error as one sentence naming the flag, never a dump with a link."""

from __future__ import annotations

from pydantic import ValidationError

# Where a field of the job spec comes from on the command line.
FLAG_OF_FIELD = {
    "name": "--name",
    "cpu_millicores": "--cpu",
    "memory_bytes": "--memory",
    "disk_bytes": "--disk",
    "device": "--gpu/--tpu/--device",
    "type": "--gpu/--tpu/--device",
    "variant": "--gpu/--tpu/--device",
    "count": "--gpu/--tpu/--device",
    "replicas": "--replicas",
    "env": "--env",
    "env_vars": "--env",
    "pip_packages": "--pip",
    "extras": "--extra",
    "constraints": "--constraint",
    "preferences": "--prefer",
    "group_by": "--group-by",
    "coscheduling": "--group-by",
    "ports": "--port",
    "timeout_s": "--timeout",
    "scheduling_timeout_s": "--scheduling-timeout",
    "max_retries_failure": "--max-retries",
    "max_retries_preemption": "--max-preemptions",
    "argv": "the command",
    "entrypoint": "the command",
    "priority": "--priority",
}


def validation_sentence(exc: ValidationError) -> str:
    """``--memory: Input should be less than or equal to 1125899906842624`` (first error only)."""
    errors = exc.errors(include_url=False)
    if not errors:
        return str(exc).splitlines()[0]
    first = errors[0]
    where = [str(part) for part in first.get("loc", ()) if not isinstance(part, int)]
    flag = next((FLAG_OF_FIELD[p] for p in reversed(where) if p in FLAG_OF_FIELD), None)
    message = str(first.get("msg", "invalid value")).removeprefix("Value error, ")
    label = flag or ".".join(where) or "input"
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    return f"{label}: {message}{more}"
