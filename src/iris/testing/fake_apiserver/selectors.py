"""Label and field selectors: parse once into requirements, then match objects (pure)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

_NAME = r"[A-Za-z0-9](?:[-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"
_PREFIX = r"[a-z0-9](?:[-a-z0-9]*[a-z0-9])?(?:\.[a-z0-9](?:[-a-z0-9]*[a-z0-9])?)*"
_KEY = rf"(?:{_PREFIX}/)?{_NAME}"
_VALUE = rf"(?:{_NAME})?"
LABEL_KEY_RE = re.compile(rf"^{_KEY}$")
LABEL_VALUE_RE = re.compile(rf"^{_VALUE}$")

_EXISTS_RE = re.compile(rf"^({_KEY})$")
_NOT_EXISTS_RE = re.compile(rf"^!\s*({_KEY})$")
_EQUALITY_RE = re.compile(rf"^({_KEY})\s*(==|=|!=)\s*({_VALUE})$")
_SET_RE = re.compile(rf"^({_KEY})\s+(in|notin)\s*\(([^()]*)\)$")
_COMPARE_RE = re.compile(rf"^({_KEY})\s*(>|<)\s*(-?[0-9]+)$")


@dataclass(frozen=True)
class Requirement:
    """One clause of a label selector. ``operator`` is one of =, !=, in, notin, exists, !, gt, lt."""

    key: str
    operator: str
    values: tuple[str, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        present = self.key in labels
        value = labels.get(self.key)
        match self.operator:
            case "exists":
                return present
            case "!":
                return not present
            case "=" | "in":
                return present and value in self.values
            case "!=" | "notin":
                return not present or value not in self.values
            case "gt" | "lt":
                if not present:
                    return False
                try:
                    number = int(value or "")
                except ValueError:
                    return False
                bound = int(self.values[0])
                return number > bound if self.operator == "gt" else number < bound
        raise AssertionError(self.operator)

    def render(self) -> str:
        match self.operator:
            case "exists":
                return self.key
            case "!":
                return f"!{self.key}"
            case "=" | "!=":
                return f"{self.key}{self.operator}{self.values[0]}"
            case "in" | "notin":
                return f"{self.key} {self.operator} ({','.join(self.values)})"
            case "gt":
                return f"{self.key}>{self.values[0]}"
            case "lt":
                return f"{self.key}<{self.values[0]}"
        raise AssertionError(self.operator)


def _split_top_level(text: str) -> list[str]:
    parts: list[str] = []
    depth = 0
    current: list[str] = []
    for ch in text:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append("".join(current))
            current = []
        else:
            current.append(ch)
    parts.append("".join(current))
    return parts


def parse_label_selector(text: str | None) -> tuple[Requirement, ...]:
    """Parse ``a=b,c!=d,e in (f,g),!h,i``; raises ValueError like the API server's 400."""
    if not text or not text.strip():
        return ()
    requirements: list[Requirement] = []
    for raw in _split_top_level(text):
        part = raw.strip()
        if match := _NOT_EXISTS_RE.match(part):
            requirements.append(Requirement(match.group(1), "!"))
        elif match := _EQUALITY_RE.match(part):
            op = "!=" if match.group(2) == "!=" else "="
            requirements.append(Requirement(match.group(1), op, (match.group(3),)))
        elif match := _SET_RE.match(part):
            values = tuple(v.strip() for v in match.group(3).split(","))
            if not values or any(not LABEL_VALUE_RE.match(v) for v in values) or values == ("",):
                raise ValueError(
                    f"unable to parse requirement: values in {part!r} are not valid label values"
                )
            requirements.append(Requirement(match.group(1), match.group(2), values))
        elif match := _COMPARE_RE.match(part):
            requirements.append(
                Requirement(match.group(1), "gt" if match.group(2) == ">" else "lt", (match.group(3),))
            )
        elif match := _EXISTS_RE.match(part):
            requirements.append(Requirement(match.group(1), "exists"))
        else:
            raise ValueError(
                f"unable to parse requirement: found {part!r}, expected: key, !key, key=value, key in (values)"
            )
    return tuple(requirements)


def labels_match(requirements: tuple[Requirement, ...], labels: Mapping[str, str] | None) -> bool:
    labels = labels or {}
    return all(r.matches(labels) for r in requirements)


@dataclass(frozen=True)
class FieldRequirement:
    field: str
    value: str
    negated: bool

    def matches(self, obj: Mapping[str, Any]) -> bool:
        return (field_value(obj, self.field) == self.value) != self.negated


def _unescape(text: str) -> str:
    return re.sub(r"\\(.)", r"\1", text)


def parse_field_selector(text: str | None) -> tuple[FieldRequirement, ...]:
    """Parse ``status.phase!=Failed,spec.nodeName=n1`` (``\\,`` escapes a comma in a value)."""
    if not text or not text.strip():
        return ()
    requirements: list[FieldRequirement] = []
    for part in re.split(r"(?<!\\),", text):
        match = re.match(r"^\s*([A-Za-z0-9_.]+)\s*(==|=|!=)(.*)$", part)
        if not match:
            raise ValueError(f"invalid selector: '{text}'; can't understand '{part}'")
        requirements.append(
            FieldRequirement(match.group(1), _unescape(match.group(3).strip()), match.group(2) == "!=")
        )
    return tuple(requirements)


_FIELD_ALIASES = {"source": "source.component"}


def field_value(obj: Mapping[str, Any], path: str) -> str:
    """A field of an object as the API server compares it: a string, "" when absent."""
    current: Any = obj
    for part in _FIELD_ALIASES.get(path, path).split("."):
        if not isinstance(current, Mapping):
            return ""
        current = current.get(part)
    if current is None:
        return ""
    if isinstance(current, bool):
        return "true" if current else "false"
    return str(current)


def fields_match(requirements: tuple[FieldRequirement, ...], obj: Mapping[str, Any]) -> bool:
    return all(r.matches(obj) for r in requirements)
