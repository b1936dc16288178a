"""Hostile or absurd input is refused with a clear 4xx and changes nothing (issue: reliability §6, §8)."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from iris.client import LocalCluster
from iris.cluster.controller.http_guard import MAX_REQUEST_BYTES
from iris.rpc.models import MAX_ARG_STRING_BYTES, MAX_ARGV_ENV_BYTES


@pytest.fixture(scope="module")
def api() -> Iterator[httpx.Client]:
    with LocalCluster(workers=0) as lc, httpx.Client(base_url=lc.url, timeout=30) as client:
        yield client


def _spec(**overrides: object) -> dict[str, object]:
    spec: dict[str, object] = {"name": "bounds", "entrypoint": {"kind": "command", "argv": ["true"]}}
    spec.update(overrides)
    return spec


def _job_count(api: httpx.Client) -> int:
    return len(api.get("/api/v1/jobs", params={"limit": 500}).json()["jobs"])


def _rejected(resp: httpx.Response, status: int, words: str) -> None:
    assert resp.status_code == status, resp.text[:300]
    message = resp.json()["error"]["message"]
    assert words in message, message


def test_a_body_over_the_limit_is_refused_before_it_is_read(api: httpx.Client) -> None:
    before = _job_count(api)
    blob = "x" * (MAX_REQUEST_BYTES + 1)
    resp = api.post("/api/v1/jobs", content=('{"name": "big", "pad": "' + blob + '"}').encode(),
                    headers={"content-type": "application/json"})  # fmt: skip
    _rejected(resp, 413, "byte limit")
    assert _job_count(api) == before


def test_a_chunked_body_over_the_limit_is_refused(api: httpx.Client) -> None:
    chunk = b"x" * (1024 * 1024)

    def body() -> Iterator[bytes]:
        yield b'{"name": "big", "pad": "'
        for _ in range(MAX_REQUEST_BYTES // len(chunk) + 2):
            yield chunk
        yield b'"}'

    resp = api.post("/api/v1/jobs", content=body(), headers={"content-type": "application/json"})
    _rejected(resp, 413, "byte limit")


@pytest.mark.parametrize("value", ["Infinity", "NaN", "-Infinity"])
def test_non_finite_resources_and_timeouts_are_refused(api: httpx.Client, value: str) -> None:
    command = '"entrypoint": {"kind": "command", "argv": ["true"]}'
    for field in ('"resources": {"cpu": VALUE}', '"resources": {"memory": VALUE}', '"timeout_s": VALUE'):
        body = '{"name": "n", ' + command + ", " + field.replace("VALUE", value) + "}"
        resp = api.post("/api/v1/jobs", content=body.encode(), headers={"content-type": "application/json"})
        assert resp.status_code == 400, (body, resp.status_code, resp.text[:200])
        assert resp.json()["error"]["message"]
    for text in ("inf", "nan", "1e400"):
        resp = api.post("/api/v1/jobs", json=_spec(resources={"cpu": text}))
        assert resp.status_code == 400, (text, resp.text[:200])


def test_nul_in_argv_or_env_is_refused(api: httpx.Client) -> None:
    _rejected(
        api.post("/api/v1/jobs", json=_spec(entrypoint={"kind": "command", "argv": ["echo", "a\0b"]})),
        400,
        "NUL",
    )
    _rejected(api.post("/api/v1/jobs", json=_spec(env={"A": "x\0y"})), 400, "NUL")


def test_argv_and_env_are_bounded_by_arg_max(api: httpx.Client) -> None:
    big = "y" * (MAX_ARG_STRING_BYTES - 100)  # each string fits; together they are over 1 MiB
    argv = ["echo"] + [big] * (MAX_ARGV_ENV_BYTES // len(big) + 1)
    _rejected(
        api.post("/api/v1/jobs", json=_spec(entrypoint={"kind": "command", "argv": argv})),
        400,
        "command line",
    )
    env = {f"V{i}": big for i in range(MAX_ARGV_ENV_BYTES // len(big) + 1)}
    _rejected(api.post("/api/v1/jobs", json=_spec(env=env)), 400, "1 MiB")


def test_one_env_value_or_argument_over_128_kib_is_refused_at_submit(api: httpx.Client) -> None:
    """The kernel refuses any one ``KEY=value`` (or argument) over 128 KiB: such a job never starts."""
    before = _job_count(api)
    over = "z" * MAX_ARG_STRING_BYTES
    _rejected(api.post("/api/v1/jobs", json=_spec(env={"BIG": over})), 400, "environment variable BIG is")
    argv = {"kind": "command", "argv": ["echo", over]}
    _rejected(api.post("/api/v1/jobs", json=_spec(entrypoint=argv)), 400, "128 KiB")
    assert _job_count(api) == before
    fits = "z" * (MAX_ARG_STRING_BYTES - len("BIG=") - 1)
    assert api.post("/api/v1/jobs", json=_spec(name="fits", env={"BIG": fits})).status_code == 200


def test_the_128_kib_bound_counts_bytes_not_characters(api: httpx.Client) -> None:
    """Under 128 KiB characters but over 128 KiB bytes once encoded: refused as the kernel would."""
    wide = "\u00e9" * (MAX_ARG_STRING_BYTES // 2 + 1)  # 2 bytes each in UTF-8
    assert len(wide) < MAX_ARG_STRING_BYTES
    argv = {"kind": "command", "argv": ["echo", wide]}
    _rejected(api.post("/api/v1/jobs", json=_spec(entrypoint=argv)), 400, "128 KiB")
    _rejected(api.post("/api/v1/jobs", json=_spec(env={"WIDE": wide})), 400, "environment variable WIDE is")


@pytest.mark.parametrize("package", ["--index-url=http://127.0.0.1:1/simple", "-e .", "numpy\n--pre", ""])
def test_options_cannot_be_smuggled_into_pip_packages(api: httpx.Client, package: str) -> None:
    resp = api.post("/api/v1/jobs", json=_spec(environment={"pip_packages": [package]}))
    assert resp.status_code == 400, resp.text[:200]
    assert "pip package" in resp.json()["error"]["message"]


def test_every_response_carries_browser_security_headers(api: httpx.Client) -> None:
    for path in ("/", "/api/v1/jobs", "/api/v1/does-not-exist", "/healthz"):
        resp = api.get(path)
        assert resp.headers["x-frame-options"] == "DENY", path
        assert resp.headers["x-content-type-options"] == "nosniff", path
        csp = resp.headers["content-security-policy"]
        assert "frame-ancestors 'none'" in csp and "script-src 'self'" in csp, path
