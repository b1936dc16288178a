"""Fixtures: one TLS + token fake API server per module, a fresh namespace per test."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path

import pytest

from iris.testing.fake_apiserver import NAMESPACES, FakeApiServer

TOKEN = "test-token"
_namespaces = itertools.count()


@pytest.fixture(scope="module")
def api_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FakeApiServer]:
    server = FakeApiServer(
        tokens=[TOKEN], tls=True, state_dir=tmp_path_factory.mktemp("apiserver"), bookmark_interval=0.2
    )
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def kubeconfig(api_server: FakeApiServer, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return api_server.write_kubeconfig(tmp_path_factory.mktemp("kube") / "config")


@pytest.fixture
def namespace(api_server: FakeApiServer) -> str:
    name = f"t{next(_namespaces)}"
    api_server.store.create(NAMESPACES, None, {"metadata": {"name": name}})
    return name
