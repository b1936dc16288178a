"""Task images on the real control plane (through the node agent): a job's image is its pod's image
with the job's pull policy, and an image that cannot be pulled (the node agent answers
``ErrImagePull`` for any image named ``does-not-exist``) ends the attempt with failure kind
``image`` naming it, after ``backend.kubernetes.image_pull_grace_s``, and its pod is deleted."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from tests.conftest import wait_until
from tests.journeys.harness import Kube, kubernetes_cluster

from iris.client import Entrypoint, IrisClient, JobState, ResourceSpec
from iris.testing.control_plane import ControlPlane

pytestmark = pytest.mark.real_k8s

SMALL = ResourceSpec(cpu=0.5, memory="64MB")


@pytest.fixture(scope="module")
def k8s(
    real_control_plane: ControlPlane, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[IrisClient, Kube]]:
    config = (
        "backend: {kind: kubernetes, backend_id: kubernetes, kubernetes: {image_pull_grace_s: 2}}\n"
        "defaults: {worker: {reconcile_interval_s: 0.5}}\n"
    )
    with kubernetes_cluster(real_control_plane, tmp_path_factory.mktemp("images"), config) as k8s:
        yield k8s


def _pod_of(kube: Kube, uid: str) -> dict | None:
    pods = [p for p in kube.pods() if p["metadata"]["labels"].get("iris.attempt_uid") == uid]
    return pods[0] if pods else None


def test_a_jobs_image_is_its_pods_image(k8s: tuple[IrisClient, Kube]) -> None:
    client, kube = k8s
    job = client.submit(
        Entrypoint.from_command("sh", "-c", "echo in-the-image"),
        name="imaged",
        resources=SMALL,
        image="iris-test/busybox:1",
        image_pull_policy="never",
    )
    uid = wait_until(lambda: job.detail().tasks[0].current_attempt_uid, timeout=60, what="an attempt")
    pod = wait_until(lambda: _pod_of(kube, uid), timeout=60, what="the attempt's pod")
    [container] = [c for c in pod["spec"]["containers"]]
    assert (container["image"], container["imagePullPolicy"]) == ("iris-test/busybox:1", "Never")
    assert job.wait(timeout=90).state is JobState.SUCCEEDED
    assert job.logs() == ["in-the-image"]


def test_a_missing_image_ends_the_attempt_with_kind_image(k8s: tuple[IrisClient, Kube]) -> None:
    client, kube = k8s
    image = "registry.example/does-not-exist:1"
    job = client.submit(Entrypoint.from_command("true"), name="no-image", resources=SMALL, image=image)
    uid = wait_until(lambda: job.detail().tasks[0].current_attempt_uid, timeout=60, what="an attempt")
    wait_until(lambda: _pod_of(kube, uid), timeout=60, what="the attempt's pod")
    failure = wait_until(lambda: job.detail().tasks[0].failure, timeout=90, what="the task's failure")
    assert failure.kind == "image", failure
    assert image in failure.summary, failure
    # Kubernetes' own reason: ErrImagePull, or ImagePullBackOff once the kubelet backs off.
    assert "ErrImagePull" in failure.summary or "ImagePullBackOff" in failure.summary, failure
    assert job.detail().state is JobState.FAILED
    wait_until(lambda: _pod_of(kube, uid) is None, timeout=60, what="the pod deleted")
