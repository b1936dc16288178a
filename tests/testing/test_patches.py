"""Merge patch, strategic merge patch and JSON patch (pure)."""

from __future__ import annotations

import pytest

from iris.testing.fake_apiserver.patches import JsonPatchError, json_patch, merge_patch, strategic_merge_patch

POD = {
    "metadata": {"labels": {"a": "1", "b": "2"}, "finalizers": ["x"]},
    "spec": {
        "schedulingGates": [{"name": "kueue.x-k8s.io/admission"}, {"name": "other"}],
        "containers": [{"name": "main", "image": "i:1", "env": [{"name": "A", "value": "1"}]}],
    },
}


def test_merge_patch_sets_removes_and_replaces_lists() -> None:
    patched = merge_patch(
        POD, {"metadata": {"labels": {"a": None, "c": "3"}}, "spec": {"schedulingGates": []}}
    )
    assert patched["metadata"]["labels"] == {"b": "2", "c": "3"}
    assert patched["spec"]["schedulingGates"] == []
    assert POD["metadata"]["labels"] == {"a": "1", "b": "2"}, "inputs are never mutated"


def test_strategic_merge_patch_merges_lists_by_key() -> None:
    patched = strategic_merge_patch(
        POD,
        {
            "spec": {
                "schedulingGates": [{"$patch": "delete", "name": "kueue.x-k8s.io/admission"}],
                "containers": [{"name": "main", "image": "i:2", "env": [{"name": "B", "value": "2"}]}],
            },
            "metadata": {"finalizers": ["y"]},
        },
    )
    assert patched["spec"]["schedulingGates"] == [{"name": "other"}]
    assert patched["spec"]["containers"][0]["image"] == "i:2"
    assert [e["name"] for e in patched["spec"]["containers"][0]["env"]] == ["A", "B"]
    assert patched["metadata"]["finalizers"] == ["x", "y"]


def test_strategic_merge_patch_directives() -> None:
    removed = strategic_merge_patch(POD, {"metadata": {"$deleteFromPrimitiveList/finalizers": ["x"]}})
    assert removed["metadata"]["finalizers"] == []
    replaced = strategic_merge_patch(POD, {"metadata": {"labels": {"$patch": "replace", "z": "9"}}})
    assert replaced["metadata"]["labels"] == {"z": "9"}


@pytest.mark.parametrize(
    ("ops", "check"),
    [
        (
            [{"op": "add", "path": "/metadata/labels/c", "value": "3"}],
            lambda d: d["metadata"]["labels"]["c"] == "3",
        ),
        (
            [{"op": "remove", "path": "/spec/schedulingGates/0"}],
            lambda d: d["spec"]["schedulingGates"] == [{"name": "other"}],
        ),
        (
            [{"op": "replace", "path": "/metadata/finalizers", "value": []}],
            lambda d: d["metadata"]["finalizers"] == [],
        ),
        (
            [{"op": "add", "path": "/metadata/finalizers/-", "value": "z"}],
            lambda d: d["metadata"]["finalizers"] == ["x", "z"],
        ),
        (
            [{"op": "move", "from": "/metadata/labels/a", "path": "/metadata/labels/m"}],
            lambda d: d["metadata"]["labels"] == {"b": "2", "m": "1"},
        ),
        (
            [{"op": "copy", "from": "/metadata/labels/a", "path": "/metadata/labels/k"}],
            lambda d: d["metadata"]["labels"]["k"] == "1",
        ),
        ([{"op": "test", "path": "/metadata/labels/a", "value": "1"}], lambda d: d == POD),
        (
            [{"op": "add", "path": "/metadata/annotations", "value": {"a~b/c": "1"}}],
            lambda d: "a~b/c" in d["metadata"]["annotations"],
        ),
        (
            [{"op": "add", "path": "/metadata/labels/x~1y", "value": "v"}],
            lambda d: d["metadata"]["labels"]["x/y"] == "v",
        ),
    ],
)
def test_json_patch_operations(ops: list[dict], check) -> None:
    assert check(json_patch(POD, ops))


@pytest.mark.parametrize(
    "ops",
    [
        [{"op": "test", "path": "/metadata/labels/a", "value": "2"}],
        [{"op": "remove", "path": "/metadata/labels/nope"}],
        [{"op": "replace", "path": "/spec/missing", "value": 1}],
        [{"op": "remove", "path": "/spec/schedulingGates/7"}],
        [{"op": "frobnicate", "path": "/x"}],
        {"op": "add"},
    ],
)
def test_json_patch_failures(ops) -> None:
    with pytest.raises(JsonPatchError):
        json_patch(POD, ops)
