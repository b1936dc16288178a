"""Arbitrary bodies never break the store: every rejection is an ApiError with a 4xx code."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from iris.testing.fake_apiserver import (
    CONFIGMAPS,
    NAMESPACES,
    PATCH_JSON,
    PATCH_MERGE,
    PATCH_STRATEGIC,
    PODS,
    WORKLOADS,
    ApiError,
    ObjectStore,
)
from iris.testing.fake_apiserver.resources import ResourceRegistry

_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-3, 3),
    st.sampled_from(["", "a", "x/y", "Bad Name", "500m", "1Gi", "-"]),
)
_json = st.recursive(
    _scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.dictionaries(
            st.sampled_from(["name", "image", "a", "requests", "limits", "cpu"]), inner, max_size=3
        ),
    ),
    max_leaves=12,
)
_metadata = st.fixed_dictionaries(
    {},
    optional={
        "name": st.one_of(st.just("p"), _scalars),
        "labels": _json,
        "annotations": _json,
        "finalizers": _json,
        "generateName": _scalars,
    },
)
_container = st.fixed_dictionaries(
    {},
    optional={
        "name": _json,
        "image": _json,
        "resources": st.one_of(
            _json, st.fixed_dictionaries({"requests": st.dictionaries(st.just("cpu"), _json)})
        ),
    },
)
_spec = st.one_of(
    _json,
    st.fixed_dictionaries(
        {},
        optional={
            "containers": st.one_of(_json, st.lists(_container, max_size=2)),
            "schedulingGates": _json,
            "nodeSelector": _json,
            "restartPolicy": _json,
            "priorityClassName": _json,
        },
    ),
)
_bodies = st.fixed_dictionaries(
    {},
    optional={
        "metadata": st.one_of(_metadata, _json),
        "spec": _spec,
        "status": _json,
        "kind": _scalars,
        "apiVersion": _scalars,
    },
)


def _store() -> ObjectStore:
    store = ObjectStore(ResourceRegistry())
    store.create(NAMESPACES, None, {"metadata": {"name": "ns"}})
    store.create(
        PODS, "ns", {"metadata": {"name": "existing"}, "spec": {"containers": [{"name": "c", "image": "i"}]}}
    )
    return store


def _only_client_errors(action: Any) -> None:
    try:
        action()
    except ApiError as exc:
        assert 400 <= exc.code < 500, exc.message


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_bodies, st.sampled_from([PODS, CONFIGMAPS, WORKLOADS]))
def test_create_and_replace_reject_garbage_cleanly(body: dict, resource) -> None:
    store = _store()
    _only_client_errors(lambda: store.create(resource, "ns", body))
    _only_client_errors(lambda: store.replace(PODS, "ns", "existing", body))


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    _json,
    st.sampled_from([PATCH_MERGE, PATCH_STRATEGIC, PATCH_JSON, "text/plain"]),
    st.sampled_from([None, "status"]),
)
def test_patches_reject_garbage_cleanly(patch: Any, patch_type: str, subresource: str | None) -> None:
    store = _store()
    _only_client_errors(
        lambda: store.patch(PODS, "ns", "existing", patch, patch_type, subresource=subresource)
    )
