"""Constraints on worker attributes, and taints that a task must tolerate explicitly.

A constraint is satisfied by one worker's attribute value (``None`` when the worker lacks the
attribute):

- EQ / IN: the attribute is present and equal to the value / one of the values;
- NE: the attribute is missing or different; NOT_EXISTS: only a missing attribute;
- GT / GE / LT / LE: numeric comparison; a missing or non-numeric attribute does not satisfy.

A worker attribute whose key starts with ``taint:`` keeps off every task that does not name the
key in an EXISTS or EQ constraint (which must then also be satisfied, like any constraint).
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Iterable

from iris.rpc.enums import ConstraintOp
from iris.rpc.models import Constraint

TAINT_PREFIX = "taint:"

ConstraintKey = tuple[str, str, str | None, tuple[str, ...]]
Predicate = Callable[[object], bool]

_NUMERIC = {
    ConstraintOp.GT: operator.gt,
    ConstraintOp.GE: operator.ge,
    ConstraintOp.LT: operator.lt,
    ConstraintOp.LE: operator.le,
}


def constraint_key(constraint: Constraint) -> ConstraintKey:
    """A hashable identity of a constraint (the wire model is a mutable pydantic object)."""
    return (constraint.key, constraint.op.value, constraint.value, tuple(constraint.values))


def _text(value: object) -> str:
    return value if type(value) is str else str(value)


def _as_number(value: object) -> float | None:
    try:
        return float(_text(value))
    except ValueError:
        return None


def predicate(constraint: Constraint) -> Predicate:
    """A function of one worker's attribute value (``None`` if absent) -> satisfied."""
    op = constraint.op
    target = constraint.value
    if op is ConstraintOp.EXISTS:
        return lambda v: v is not None
    if op is ConstraintOp.NOT_EXISTS:
        return lambda v: v is None
    if op is ConstraintOp.EQ:
        return lambda v: v is not None and _text(v) == target
    if op is ConstraintOp.NE:
        return lambda v: v is None or _text(v) != target
    if op is ConstraintOp.IN:
        allowed = frozenset(constraint.values)
        return lambda v: v is not None and _text(v) in allowed
    compare = _NUMERIC[op]
    bound = float(target or "nan")

    def numeric(v: object) -> bool:
        if v is None:
            return False
        number = _as_number(v)
        return number is not None and compare(number, bound)

    return numeric


def satisfies(constraint: Constraint, attributes: dict[str, str]) -> bool:
    return predicate(constraint)(attributes.get(constraint.key))


def tolerated_taints(constraints: Iterable[Constraint]) -> frozenset[str]:
    """Taint keys a task tolerates: those it names with an EXISTS or EQ constraint."""
    return frozenset(
        c.key
        for c in constraints
        if c.key.startswith(TAINT_PREFIX) and c.op in (ConstraintOp.EXISTS, ConstraintOp.EQ)
    )


def taints_of(attributes: Iterable[str]) -> frozenset[str]:
    return frozenset(key for key in attributes if key.startswith(TAINT_PREFIX))
