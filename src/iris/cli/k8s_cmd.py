"""``iris k8s``: Kubernetes helpers for operators."""

from __future__ import annotations

import click

from iris.cluster.backends.kubernetes.manifests import (
    DEFAULT_IMAGE,
    KUEUE_API_VERSIONS,
    manifests_yaml,
    render_manifests,
)


@click.group("k8s")
def k8s() -> None:
    """Deploy Iris on Kubernetes with Kueue."""


@k8s.command("manifests")
@click.option(
    "--namespace", "-n", default="iris", show_default=True, help="Namespace for Iris and its task pods."
)
@click.option("--image", default=DEFAULT_IMAGE, show_default=True, help="Image of the controller.")
@click.option(
    "--queue", default="iris", show_default=True, help="Name of the Kueue LocalQueue task pods join."
)
@click.option(
    "--cluster-queue", default=None, help="Name of the Kueue ClusterQueue [default: iris-NAMESPACE]."
)
@click.option("--flavor", default="iris-default", show_default=True, help="Name of the Kueue ResourceFlavor.")
@click.option("--cpu-quota", default="64", show_default=True, help="ClusterQueue nominal quota of CPUs.")
@click.option(
    "--memory-quota", default="256Gi", show_default=True, help="ClusterQueue nominal quota of memory."
)
@click.option(
    "--disk-quota", default="1Ti", show_default=True, help="ClusterQueue quota of ephemeral storage."
)
@click.option("--gpu-quota", default="0", show_default=True, help="ClusterQueue quota of nvidia.com/gpu.")
@click.option("--tpu-quota", default="0", show_default=True, help="ClusterQueue quota of google.com/tpu.")
@click.option("--port", "controller_port", default=10000, show_default=True, help="Controller HTTP port.")
@click.option("--storage", default="1Gi", show_default=True, help="Size of the controller's state volume.")
@click.option(
    "--storage-class", default=None, help="StorageClass of the state volume [default: the cluster's]."
)
@click.option(
    "--kueue-api-version",
    type=click.Choice(KUEUE_API_VERSIONS),
    default="v1beta2",
    show_default=True,
    help="Kueue API version (v1beta1 for Kueue releases before 0.15).",
)
def manifests(
    namespace: str,
    image: str,
    queue: str,
    cluster_queue: str | None,
    flavor: str,
    cpu_quota: str,
    memory_quota: str,
    disk_quota: str,
    gpu_quota: str,
    tpu_quota: str,
    controller_port: int,
    storage: str,
    storage_class: str | None,
    kueue_api_version: str,
) -> None:
    """Print the YAML an operator applies: `iris k8s manifests | kubectl apply -f -`."""
    try:
        objects = render_manifests(
            namespace=namespace,
            image=image,
            queue=queue,
            cluster_queue=cluster_queue,
            resource_flavor=flavor,
            cpu_quota=cpu_quota,
            memory_quota=memory_quota,
            disk_quota=disk_quota,
            gpu_quota=gpu_quota,
            tpu_quota=tpu_quota,
            controller_port=controller_port,
            storage=storage,
            storage_class=storage_class,
            kueue_api_version=kueue_api_version,
        )
    except ValueError as err:
        raise click.UsageError(str(err)) from err
    click.echo(manifests_yaml(objects), nl=False)
