"""The torch.distributed example of docs/gpus-and-tpus.md, run as written (no Iris code in it), as a
two-task gang on the WORKER backend and on the real control plane (``real_k8s``, node-agent nodes):
``init_process_group("gloo")`` with no arguments, an all-reduce, each rank checks the sum. Every
member's torchrun variables (MASTER_ADDR, MASTER_PORT, WORLD_SIZE, RANK, LOCAL_RANK, NODE_RANK)
and JAX variables are present and agree with each other and with the other member's.

Slow for a journey (~10-60 s): each member imports torch (~3 s idle, 20 s and more on a loaded
2-core machine) before gloo connects them."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.journeys.harness import SUBSTRATE_PARAMS, Journey, substrate_cluster

from iris.client import CoschedulingConfig, Entrypoint, JobState, ResourceSpec
from iris.rpc.enums import TERMINAL_JOB_STATES

DOC = Path(__file__).resolve().parents[2] / "docs" / "gpus-and-tpus.md"
TORCH_VARS = ("MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK", "LOCAL_RANK", "NODE_RANK")
JAX_VARS = ("JAX_COORDINATOR_ADDRESS", "JAX_NUM_PROCESSES", "JAX_PROCESS_ID")
# Appended to the doc's block: what each member was started with, after the example has run.
REPORT_ENV = (
    "\nimport os as _os\n"
    f"print('env', *(f'{{k}}={{_os.environ.get(k)}}' for k in {TORCH_VARS + JAX_VARS!r}))\n"
)


def example(first_line: str) -> str:
    """The ```python block of the doc that starts with ``first_line``."""
    for block in re.findall(r"```python\n(.*?)```", DOC.read_text(), re.S):
        if block.startswith(first_line):
            return block
    raise AssertionError(f"docs/gpus-and-tpus.md has no python block starting {first_line!r}")


@pytest.fixture(scope="module", params=SUBSTRATE_PARAMS)
def j(request: pytest.FixtureRequest) -> Iterator[Journey]:
    with substrate_cluster(request, workers=2, attributes=[{"pool": "a"}] * 2) as journey:
        yield journey


def test_the_torch_example_all_reduces_over_a_gang_with_no_arguments(j: Journey) -> None:
    import torch.distributed  # noqa: F401  (a dev dependency: a missing torch is a broken environment)

    code = example("# train_torch.py") + REPORT_ENV
    job = j.client.submit(
        Entrypoint.from_command(j.python, "-c", code),
        name="torch-example",
        replicas=2,
        resources=ResourceSpec(cpu=0.5, memory="1GB"),
        coscheduling=CoschedulingConfig(group_by="pool"),
    )

    def finished() -> object:
        detail = job.detail()
        return detail if detail.state in TERMINAL_JOB_STATES else None

    detail = j.step(finished, timeout=240, what="torch gang done")
    lines = job.logs()
    assert detail.state is JobState.SUCCEEDED, (lines, j.attempt_history())
    assert sorted(line for line in lines if line.startswith("rank ")) == [
        "rank 0 of 2: all-reduce 3.0",
        "rank 1 of 2: all-reduce 3.0",
    ], lines
    envs = [dict(kv.split("=", 1) for kv in line.split()[1:]) for line in lines if line.startswith("env ")]
    envs.sort(key=lambda env: env["RANK"])
    assert len(envs) == 2, lines
    for rank, env in enumerate(envs):
        assert {k: env[k] for k in ("RANK", "NODE_RANK", "JAX_PROCESS_ID")} == dict.fromkeys(
            ("RANK", "NODE_RANK", "JAX_PROCESS_ID"), str(rank)
        ), env
        assert env["LOCAL_RANK"] == "0" and env["WORLD_SIZE"] == env["JAX_NUM_PROCESSES"] == "2", env
        assert env["MASTER_ADDR"] and env["MASTER_PORT"].isdigit(), env
        assert env["JAX_COORDINATOR_ADDRESS"] == f"{env['MASTER_ADDR']}:{env['MASTER_PORT']}", env
    assert envs[0]["JAX_COORDINATOR_ADDRESS"] == envs[1]["JAX_COORDINATOR_ADDRESS"], envs
