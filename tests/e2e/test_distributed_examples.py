"""The JAX distributed-training example of docs/gpus-and-tpus.md, run as written (no Iris code in
it) as a real two-task gang on the WORKER backend: JAX on the CPU. The torch example runs on both
backends in tests/journeys/test_distributed_training.py."""

from __future__ import annotations

import re
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from iris.client import CoschedulingConfig, Entrypoint, IrisClient, JobState, LocalCluster, ResourceSpec

DOC = Path(__file__).resolve().parents[2] / "docs" / "gpus-and-tpus.md"


def example(first_line: str) -> str:
    """The ```python block of the doc that starts with ``first_line``."""
    for block in re.findall(r"```python\n(.*?)```", DOC.read_text(), re.S):
        if block.startswith(first_line):
            return block
    raise AssertionError(f"docs/gpus-and-tpus.md has no python block starting {first_line!r}")


@pytest.fixture(scope="module")
def client() -> Iterator[IrisClient]:
    with LocalCluster(workers=2, worker_cpu="2", worker_attributes=[{"pool": "a"}, {"pool": "a"}]) as lc:
        with IrisClient(lc.url) as c:
            yield c


def run_gang(client: IrisClient, name: str, code: str, env: dict[str, str]) -> list[str]:
    job = client.submit(
        Entrypoint.from_command(sys.executable, "-c", code),
        name=name,
        replicas=2,
        resources=ResourceSpec(cpu=1, memory="1GB"),
        coscheduling=CoschedulingConfig(group_by="pool"),
        env=env,
    )
    detail = job.wait(timeout=240)
    lines = job.logs()
    assert detail.state is JobState.SUCCEEDED, "\n".join(lines)
    return lines


def test_the_jax_example_forms_one_jax_cluster(client: IrisClient) -> None:
    """Importing jaxlib and starting its coordination service takes ~10-25 s on a loaded machine."""
    import jax  # noqa: F401  (a dev dependency: a missing jax is a broken environment, not a skip)

    lines = run_gang(client, "jax-example", example("# train_jax.py"), {"JAX_PLATFORMS": "cpu"})
    results = sorted(line for line in lines if line.startswith("process "))
    assert results == [
        "process 0 of 2: 2 devices, ranks [0, 1]",
        "process 1 of 2: 2 devices, ranks [0, 1]",
    ], lines
