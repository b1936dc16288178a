"""Request paths to resources (pure)."""

from __future__ import annotations

import pytest

from iris.testing.fake_apiserver.resources import ResourceRegistry
from iris.testing.fake_apiserver.routing import route_resource

REGISTRY = ResourceRegistry()


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("/api/v1/pods", ("pods", None, None, None)),
        ("/api/v1/namespaces/ns/pods", ("pods", "ns", None, None)),
        ("/api/v1/namespaces/ns/pods/p", ("pods", "ns", "p", None)),
        ("/api/v1/namespaces/ns/pods/p/log", ("pods", "ns", "p", "log")),
        ("/api/v1/namespaces/ns/pods/p/status", ("pods", "ns", "p", "status")),
        ("/api/v1/namespaces", ("namespaces", None, None, None)),
        ("/api/v1/namespaces/ns", ("namespaces", None, "ns", None)),
        ("/api/v1/namespaces/ns/status", ("namespaces", None, "ns", "status")),
        ("/api/v1/nodes/n1", ("nodes", None, "n1", None)),
        ("/apis/kueue.x-k8s.io/v1beta1/namespaces/ns/workloads/w", ("workloads", "ns", "w", None)),
        ("/apis/kueue.x-k8s.io/v1beta1/clusterqueues/cq/status", ("clusterqueues", None, "cq", "status")),
        ("/apis/scheduling.k8s.io/v1/priorityclasses", ("priorityclasses", None, None, None)),
        ("/api/v1/watch/namespaces/ns/pods", ("pods", "ns", None, None)),
    ],
)
def test_known_paths(path: str, expected: tuple) -> None:
    route = route_resource(path, REGISTRY)
    assert route is not None
    assert (route.resource.plural, route.namespace, route.name, route.subresource) == expected
    assert route.legacy_watch == ("/watch/" in path)


@pytest.mark.parametrize(
    "path",
    [
        "/api/v1/widgets",
        "/apis/kueue.x-k8s.io/v9/workloads",
        "/api/v1/pods/p",
        "/api/v1/namespaces/ns/pods/p/exec/x",
        "/healthz",
        "/api/v1/namespaces/ns/pods/p/bogus",
    ],
)
def test_unknown_paths(path: str) -> None:
    assert route_resource(path, REGISTRY) is None
