"""Per-user budgets on the KUBERNETES backend, on the real control plane (docs/budgets.md): Iris
refuses at submit what a budget can never admit (a band above ``max_band``), as on WORKER; a
budget's resource limits are Kueue's job there, so Iris creates the pods of work beyond a user's
cpu budget (on WORKER it would hold them with "user budget: ...") and Kueue admits them by its
ClusterQueue quota."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from tests.conftest import wait_until
from tests.journeys.harness import Kube, kubernetes_cluster

from iris.client import Entrypoint, IrisClient, JobState, ResourceSpec
from iris.rpc.enums import PriorityBand
from iris.rpc.errors import PermissionDenied
from iris.testing.control_plane import ControlPlane

pytestmark = pytest.mark.real_k8s

SMALL = ResourceSpec(cpu=0.5, memory="64MB")


@pytest.fixture(scope="module")
def k8s(
    real_control_plane: ControlPlane, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[IrisClient, Kube]]:
    config = (
        "backend: {kind: kubernetes, backend_id: kubernetes}\n"
        "defaults: {worker: {reconcile_interval_s: 0.5}}\n"
        "user_budgets:\n  carol: {cpu: 0.5, max_band: BATCH}\n"
    )
    with kubernetes_cluster(real_control_plane, tmp_path_factory.mktemp("budgets"), config) as k8s:
        yield k8s


def test_a_band_above_the_budget_is_refused_at_submit(k8s: tuple[IrisClient, Kube]) -> None:
    client, _ = k8s
    with pytest.raises(PermissionDenied, match="carol may submit at BATCH priority or lower"):
        client.submit(
            Entrypoint.from_command("true"),
            name="too-important",
            resources=SMALL,
            user="carol",
            priority=PriorityBand.INTERACTIVE,
        )


def test_work_beyond_the_cpu_budget_gets_pods_and_kueue_admits_it(k8s: tuple[IrisClient, Kube]) -> None:
    client, _ = k8s
    jobs = [
        client.submit(
            Entrypoint.from_command("sleep", "60"),
            name=f"over-{n}",
            resources=SMALL,
            user="carol",
            priority=PriorityBand.BATCH,
        )
        for n in range(2)
    ]
    try:
        # Both run at once although carol's budget holds one (on WORKER the second would wait
        # with "user budget: carol uses 0.5 of 0.5 cpu"): Iris does not gate cpu on KUBERNETES,
        # and the ClusterQueue's quota admits both.
        wait_until(
            lambda: all(j.status() is JobState.RUNNING for j in jobs), timeout=120, what="both jobs running"
        )
        for job in jobs:
            assert not (job.detail().tasks[0].pending_reason or "").startswith("user budget")
    finally:
        for job in jobs:
            job.kill()
    for job in jobs:
        assert job.wait(timeout=120).state is JobState.KILLED
