"""The ``container_engine`` session fixture: Debian's dockerd started through the same code as
``scripts/container-engine`` (reused when already running), the test images loaded from the image
cache, and the engine stopped at the end unless another session or a person still uses it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from iris.testing import container_engine as engines


@pytest.fixture(scope="session")
def container_engine() -> Iterator[engines.Engine]:
    if not engines.available():
        pytest.skip("dockerd is not installed (.ci/run installs docker.io)")
    engine = engines.acquire()
    try:
        engines.load_images(engine)
        yield engine
    finally:
        engines.release(engine)
