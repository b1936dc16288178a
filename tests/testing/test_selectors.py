"""Label and field selectors: parsing and matching, by table and by property."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from iris.testing.fake_apiserver.selectors import (
    Requirement,
    field_value,
    fields_match,
    labels_match,
    parse_field_selector,
    parse_label_selector,
)

LABELS = {"app": "web", "tier": "front", "example.com/team": "ml", "n": "5"}


@pytest.mark.parametrize(
    ("selector", "expected"),
    [
        ("", True),
        ("app=web", True),
        ("app==web", True),
        ("app=db", False),
        ("app!=db", True),
        ("missing!=x", True),
        ("app!=web", False),
        ("app in (web, db)", True),
        ("app in (db)", False),
        ("app notin (db,cache)", True),
        ("missing notin (x)", True),
        ("app notin (web)", False),
        ("tier", True),
        ("missing", False),
        ("!missing", True),
        ("!app", False),
        ("example.com/team=ml", True),
        ("app=web,tier=front", True),
        ("app=web,tier=back", False),
        ("app in (web),!missing,tier", True),
        ("n>4", True),
        ("n<5", False),
        ("app=", False),
    ],
)
def test_label_selector_matches(selector: str, expected: bool) -> None:
    assert labels_match(parse_label_selector(selector), LABELS) is expected


@pytest.mark.parametrize(
    "selector", ["app=web=x", "in (a)", "app in", "app in ()", "=x", "a b", "app in (a,,b"]
)
def test_bad_label_selectors_are_rejected(selector: str) -> None:
    with pytest.raises(ValueError):
        parse_label_selector(selector)


_names = st.from_regex(r"[a-z][a-z0-9]{0,6}", fullmatch=True)
_requirements = st.one_of(
    st.builds(lambda k: Requirement(k, "exists"), _names),
    st.builds(lambda k: Requirement(k, "!"), _names),
    st.builds(lambda k, v, op: Requirement(k, op, (v,)), _names, _names, st.sampled_from(["=", "!="])),
    st.builds(
        lambda k, vs, op: Requirement(k, op, tuple(vs)),
        _names,
        st.lists(_names, min_size=1, max_size=3),
        st.sampled_from(["in", "notin"]),
    ),
)


@given(st.lists(_requirements, min_size=1, max_size=4))
def test_rendered_selectors_parse_back_to_the_same_requirements(requirements: list[Requirement]) -> None:
    text = ",".join(r.render() for r in requirements)
    assert parse_label_selector(text) == tuple(requirements)


@given(st.dictionaries(_names, _names, max_size=4), st.lists(_requirements, min_size=1, max_size=4))
def test_a_selector_matches_exactly_when_every_requirement_does(
    labels: dict[str, str], requirements: list[Requirement]
) -> None:
    parsed = parse_label_selector(",".join(r.render() for r in requirements))
    assert labels_match(parsed, labels) == all(r.matches(labels) for r in requirements)


POD = {
    "metadata": {"name": "p", "namespace": "ns"},
    "spec": {"nodeName": "n1"},
    "status": {"phase": "Running"},
}


@pytest.mark.parametrize(
    ("selector", "expected"),
    [
        ("metadata.name=p", True),
        ("metadata.name==q", False),
        ("status.phase!=Succeeded,status.phase!=Failed", True),
        ("status.phase!=Running", False),
        ("spec.nodeName=n1,metadata.namespace=ns", True),
        ("spec.nodeName=", False),
        ("spec.schedulerName=", True),
    ],
)
def test_field_selector_matches(selector: str, expected: bool) -> None:
    assert fields_match(parse_field_selector(selector), POD) is expected


def test_field_values_are_strings_and_empty_when_absent() -> None:
    assert field_value({"spec": {"unschedulable": True}}, "spec.unschedulable") == "true"
    assert field_value({}, "status.phase") == ""
    assert parse_field_selector(r"reason=a\,b")[0].value == "a,b"
