"""Bad input never breaks the API: random bodies, paths and queries get a clear 4xx JSON error, never a 5xx."""

from __future__ import annotations

import json
from collections.abc import Iterator

import httpx
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from iris.client import LocalCluster

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=False)
    | st.text(max_size=40),
    lambda children: (
        st.lists(children, max_size=5) | st.dictionaries(st.text(max_size=20), children, max_size=6)
    ),
    max_leaves=25,
)
spec_keys = st.sampled_from(
    ["name", "entrypoint", "resources", "replicas", "env", "constraints", "coscheduling", "priority", "timeout_s",
     "scheduling_timeout_s", "max_retries_failure", "parent_job_id", "ports", "user", "bundle_id", "existing_job_policy"]
)  # fmt: skip
job_specs = st.dictionaries(spec_keys, json_values, max_size=8) | st.fixed_dictionaries(
    {"name": st.text(max_size=30), "entrypoint": st.fixed_dictionaries({"kind": st.sampled_from(["command", "callable", "x"]), "argv": st.lists(st.text(max_size=10), max_size=3)})},
    optional={"resources": st.dictionaries(st.sampled_from(["cpu", "memory", "disk", "device"]), json_values, max_size=3),
              "replicas": st.integers(-5, 200_000), "priority": st.text(max_size=12)},
)  # fmt: skip
path_segments = st.lists(
    st.text(
        alphabet=st.characters(min_codepoint=33, max_codepoint=126, exclude_characters="?#/"), max_size=12
    ),
    min_size=1,
    max_size=4,
)


@pytest.fixture(scope="module")
def api() -> Iterator[httpx.Client]:
    with LocalCluster(workers=0) as lc, httpx.Client(base_url=lc.url, timeout=10) as client:
        yield client


def _assert_clean(resp: httpx.Response) -> None:
    assert resp.status_code < 500, (
        f"{resp.request.method} {resp.request.url} -> {resp.status_code}: {resp.text[:300]}"
    )
    if resp.status_code >= 400:
        body = resp.json()
        assert isinstance(body["error"]["message"], str) and body["error"]["message"]


FUZZ = settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


@FUZZ
@given(body=job_specs)
# Found by this test in CI: cpu * 1000 overflowed to inf, and round(inf) answered 500.
@example(
    body={
        "name": "",
        "entrypoint": {"kind": "command", "argv": []},
        "resources": {"cpu": 1.797693134862316e305},
    }
)
@example(
    body={
        "name": "x",
        "entrypoint": {"kind": "command", "argv": ["true"]},
        "resources": {"memory": "9" * 400 + "GB"},
    }
)
def test_submit_and_dry_run_never_5xx(api: httpx.Client, body: dict[str, object]) -> None:
    for path in ("/api/v1/dry-run", "/api/v1/jobs"):
        _assert_clean(api.post(path, content=json.dumps(body), headers={"content-type": "application/json"}))


@FUZZ
@given(raw=st.binary(max_size=200))
def test_garbage_bodies_are_400(api: httpx.Client, raw: bytes) -> None:
    for path in ("/api/v1/jobs", "/api/v1/workers/register", "/api/v1/endpoints"):
        resp = api.post(path, content=raw, headers={"content-type": "application/json"})
        _assert_clean(resp)
        assert resp.status_code >= 400


@FUZZ
@given(
    segments=path_segments,
    suffix=st.sampled_from(["", ":stop", ":events", ":logs", ":status", ":exec"]),
    query=st.dictionaries(
        st.sampled_from(["limit", "offset", "state", "attempt", "sort", "desc", "roots"]),
        st.text(max_size=8),
        max_size=3,
    ),
)
def test_unknown_ids_and_odd_queries_never_5xx(
    api: httpx.Client, segments: list[str], suffix: str, query: dict[str, str]
) -> None:
    path = "/".join(segments) + suffix
    for method, prefix in (
        ("GET", "/api/v1/jobs/"),
        ("POST", "/api/v1/jobs/"),
        ("GET", "/api/v1/tasks/"),
        ("GET", "/api/v1/jobs"),
    ):
        url = prefix + path if prefix.endswith("/") else prefix
        _assert_clean(api.request(method, url, params=query))
