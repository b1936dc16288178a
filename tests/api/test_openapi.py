"""The controller's OpenAPI document is whole: every schema a route refers to is defined, and the
routes that read their body themselves (the submit routes) still describe it."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx

from iris.client import LocalCluster


def _refs(node: Any) -> Iterator[str]:
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "$ref" and isinstance(value, str):
                yield value
            else:
                yield from _refs(value)
    elif isinstance(node, list):
        for item in node:
            yield from _refs(item)


def test_every_ref_resolves_and_submit_bodies_are_described() -> None:
    with LocalCluster(workers=0) as lc:
        doc = httpx.get(f"{lc.url}/openapi.json", timeout=10).json()
    schemas = doc["components"]["schemas"]
    missing = {ref for ref in _refs(doc) if ref.removeprefix("#/components/schemas/") not in schemas}
    assert not missing
    batch = doc["paths"]["/api/v1/jobs:batch"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    assert batch["properties"]["jobs"]["items"] == {"$ref": "#/components/schemas/JobSpec"}
    one = doc["paths"]["/api/v1/jobs"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    assert "entrypoint" in one["properties"]
