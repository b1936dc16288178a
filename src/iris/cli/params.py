"""Click parameter types for the job options: a bad value is one line naming the flag."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click

from iris.cli.job_options import (
    parse_constraint,
    parse_device,
    parse_duration,
    parse_gpu,
    parse_memory_mb,
    parse_tpu,
)


class Parsed(click.ParamType):
    """A click type from a parser that raises ValueError: errors name the flag in one line."""

    def __init__(self, name: str, parse: Callable[[str], Any]) -> None:
        self.name = name
        self._parse = parse

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if not isinstance(value, str):
            return value
        try:
            return self._parse(value)
        except ValueError as exc:
            self.fail(str(exc), param, ctx)


CONSTRAINT = Parsed("constraint", parse_constraint)
DURATION = Parsed("duration", parse_duration)
SIZE_MB = Parsed("size", parse_memory_mb)
GPU = Parsed("gpu", parse_gpu)
DEVICE = Parsed("device", parse_device)


def _check_tpu(text: str) -> str:
    parse_tpu(text)
    return text


TPU = Parsed("tpu", _check_tpu)
