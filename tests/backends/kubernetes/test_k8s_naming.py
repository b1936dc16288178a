"""Pod names and label values: always valid, deterministic, unique per attempt."""

from __future__ import annotations

import string

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from iris.cluster.backends.kubernetes.naming import (
    is_dns_label,
    is_label_value,
    label_value,
    pod_group_name,
    pod_name,
    task_name,
)

UID = "0123456789abcdef"


@pytest.mark.parametrize(
    ("task_id", "expected"),
    [
        ("/alice/train/0", "alice-train-0"),
        ("/Alice/My_Job/12", "alice-my-job-12"),
        ("/a/b.c/child/3", "a-b-c-child-3"),
        ("///", ""),
    ],
)
def test_task_name(task_id: str, expected: str) -> None:
    assert task_name(task_id) == expected


@pytest.mark.parametrize(
    ("task_id", "uid", "container", "expected"),
    [
        ("/alice/train/0", UID, "task", f"alice-train-0-{UID}-task"),
        ("/alice/train/0", "task-abc-123-xyz", "task", None),  # dashed uid: hashed form
        ("/bob/" + "x" * 80 + "/7", UID, "task", None),  # too long: truncated with a hash
        ("/alice/train/0", UID, "Sidecar_1", None),  # container needed sanitising
    ],
)
def test_pod_name_table(task_id: str, uid: str, container: str, expected: str | None) -> None:
    name = pod_name(task_id, uid, container)
    assert is_dns_label(name), name
    if expected is not None:
        assert name == expected
    else:
        assert uid.lower() in name
        assert len(name) <= 63
    assert name == pod_name(task_id, uid, container)


def test_truncated_name_keeps_uid_container_and_a_hash() -> None:
    long_task = "/bob/" + "x" * 80 + "/7"
    name = pod_name(long_task, UID)
    assert len(name) == 63
    assert name.endswith(f"-{UID}-task")
    prefix, digest = name[: -len(f"-{UID}-task")].rsplit("-", 1)
    assert prefix.startswith("bob-xxx") and len(digest) == 8


def test_tasks_sharing_a_truncated_prefix_differ() -> None:
    a = pod_name("/bob/" + "x" * 80 + "/1", "u1")
    b = pod_name("/bob/" + "x" * 80 + "/2", "u1")
    assert a != b


def test_case_differences_in_uid_do_not_collide() -> None:
    assert pod_name("/a/b/0", "abc") != pod_name("/a/b/0", "ABC")


def test_dashed_uids_do_not_collide_across_tasks() -> None:
    # Without a hash both would read "u-j-0-1-ab-task".
    assert pod_name("/u/j/0", "1-ab") != pod_name("/u/j-0/1", "ab")


@pytest.mark.parametrize("uid", ["", "---", "%%%"])
def test_unusable_uid_is_rejected(uid: str) -> None:
    with pytest.raises(ValueError, match="attempt uid"):
        pod_name("/a/b/0", uid)


def test_uid_too_long_is_rejected() -> None:
    with pytest.raises(ValueError, match="too long"):
        pod_name("/a/b/0", "a" * 60)


task_ids = st.text(alphabet=string.ascii_letters + string.digits + "/._-", min_size=0, max_size=150)
uids = st.one_of(
    st.text(alphabet="0123456789abcdef", min_size=16, max_size=16),
    st.text(alphabet=string.ascii_letters + string.digits + "-_.", min_size=1, max_size=40).filter(
        lambda u: any(c.isalnum() for c in u)
    ),
)
containers = st.sampled_from(["task", "sidecar", "Init_Container", "x"])


@settings(max_examples=300, deadline=None)
@given(task_ids, uids, containers)
def test_pod_name_is_always_a_valid_bounded_dns_label(task_id: str, uid: str, container: str) -> None:
    name = pod_name(task_id, uid, container)
    assert is_dns_label(name)
    assert len(name) <= 63
    assert name == pod_name(task_id, uid, container)


@settings(max_examples=300, deadline=None)
@given(task_ids, uids, task_ids, uids)
def test_distinct_attempts_get_distinct_names(task_a: str, uid_a: str, task_b: str, uid_b: str) -> None:
    if uid_a == uid_b:
        return
    assert pod_name(task_a, uid_a) != pod_name(task_b, uid_b)


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet=string.ascii_letters + string.digits + "/._-:@ ", max_size=200))
def test_label_value_is_always_valid(text: str) -> None:
    assert is_label_value(label_value(text))


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("/alice/train", "alice.train"),
        ("/alice/train/0", "alice.train.0"),
        ("kubernetes", "kubernetes"),
        ("", ""),
    ],
)
def test_label_value_table(text: str, expected: str) -> None:
    assert label_value(text) == expected


def test_long_label_values_keep_a_hash() -> None:
    a, b = label_value("/u/" + "j" * 100 + "a"), label_value("/u/" + "j" * 100 + "b")
    assert a != b and len(a) <= 63 and len(b) <= 63


def test_pod_group_name_is_per_generation_and_valid() -> None:
    first, second = pod_group_name("/alice/gang", 0), pod_group_name("/alice/gang", 1)
    assert first != second
    for name in (first, second, pod_group_name("/a/" + "g" * 120, 3)):
        assert is_dns_label(name) and is_label_value(name)
    assert first.startswith("alice-gang-")


@pytest.mark.parametrize("task", ["/alice/train/0", "/" + "very-long-name/" * 10 + "0"])
def test_a_pod_name_is_recognised_by_its_attempt_uid(task: str) -> None:
    from iris.cluster.backends.kubernetes.naming import is_pod_of_attempt

    name = pod_name(task, "0123456789abcdef")
    assert is_pod_of_attempt(name, "0123456789abcdef")
    assert not is_pod_of_attempt(name, "0123456789abcde")
    assert not is_pod_of_attempt(name, "123456789abcdef")
