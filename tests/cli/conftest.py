"""A local cluster shared by the CLI tests of a module, and a clean directory to run `iris` in."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from iris.client import IrisClient
from iris.client.local_cluster import LocalCluster


@pytest.fixture(scope="module")
def cluster() -> Iterator[LocalCluster]:
    with LocalCluster(workers=1, worker_cpu="8") as lc:
        yield lc


@pytest.fixture
def client(cluster: LocalCluster) -> Iterator[IrisClient]:
    with IrisClient(cluster.url) as c:
        yield c


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    """An empty directory to run `iris` in (so nothing big is taken along as the job's workspace)."""
    d = tmp_path / "work"
    d.mkdir()
    return d
