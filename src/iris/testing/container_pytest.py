"""The ``container_engine`` session fixture: Debian's dockerd started through the same code as
``scripts/container-engine`` (reused when already running), the test images loaded from the image
cache, and the engine stopped at the end unless another session or a person still uses it.

While it is up, ``DOCKER_HOST`` and ``IRIS_CONTAINER_CLI`` (Debian's docker client, the engine's own
version) are set in this process's environment, so workers started by tests use the engine."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from iris.testing import container_engine as engines


@pytest.fixture(scope="session")
def container_engine() -> Iterator[engines.Engine]:
    if not engines.available():
        pytest.skip("dockerd is not installed (.ci/run installs docker.io)")
    engine = engines.acquire()
    saved = {key: os.environ.get(key) for key in ("DOCKER_HOST", "IRIS_CONTAINER_CLI")}
    try:
        engines.load_images(engine)
        os.environ["DOCKER_HOST"] = engine.host
        os.environ["IRIS_CONTAINER_CLI"] = engines.docker_cli()
        yield engine
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        engines.release(engine)
