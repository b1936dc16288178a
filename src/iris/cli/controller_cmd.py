"""``iris controller start``: run the controller process alone."""

from __future__ import annotations

from pathlib import Path

import click

from iris.cli.output import err_console


@click.group()
def controller() -> None:
    """Run the controller process."""


@controller.command("start")
@click.option(
    "--host",
    help="Address to listen on (0.0.0.0 for other machines; default: --config's controller.host, else 127.0.0.1).",
)
@click.option("--port", type=int, help="Port to listen on (default: --config's controller.port, else 10000).")
@click.option(
    "--state-dir",
    type=click.Path(path_type=Path),
    help="Where the SQLite database lives (default: --config's controller.state_dir, else ~/.iris/controller).",
)
@click.option("--backend", type=click.Choice(["worker", "kubernetes"]), default="worker", show_default=True)
@click.option(
    "--kubeconfig",
    type=click.Path(),
    help="Kubernetes backend: kubeconfig file (default: in-cluster config).",
)
@click.option(
    "--namespace", default="iris", show_default=True, help="Kubernetes backend: namespace for pods."
)
@click.option("--queue", default="iris", show_default=True, help="Kubernetes backend: Kueue LocalQueue name.")
@click.option(
    "--tick", default=1.0, show_default=True, type=float, help="Safety-net tick of the control loop, seconds."
)
@click.option(
    "--worker-grace",
    default=60.0,
    show_default=True,
    type=float,
    help="Seconds a silent worker keeps its tasks (its attempts fence themselves a little earlier).",
)
@click.option(
    "--advertise-url", help="URL tasks and workers use to reach the controller (default: the listen address)."
)
@click.option(
    "--also-listen",
    multiple=True,
    metavar="HOST",
    help="Serve on this address too, on the same port (repeatable); needs auth (the config's auth.tokens).",
)
@click.option("--image", help="Kubernetes backend: container image for task pods.")
@click.option(
    "--environment-dir",
    help="Kubernetes backend: directory on each node where the environments of --pip and uv project "
    "jobs are built once and reused (default /var/cache/iris/envs; the config's "
    "kubernetes.environment_dir wins).",
)
@click.option(
    "--config",
    "config_path",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="Cluster config (YAML); its scale groups enable the autoscaler.",
)
@click.option(
    "--log-format",
    type=click.Choice(["text", "json"]),
    help="Log lines as text (default) or one JSON object per line (default: $IRIS_LOG_FORMAT).",
)
@click.option(
    "--log-file",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Log to this file, rotated at 20 MB with 5 kept, instead of stderr (default: $IRIS_LOG_FILE).",
)
def controller_start(
    host: str | None,
    port: int | None,
    state_dir: Path | None,
    backend: str,
    kubeconfig: str | None,
    namespace: str,
    queue: str,
    tick: float,
    worker_grace: float,
    advertise_url: str | None,
    also_listen: tuple[str, ...],
    image: str | None,
    environment_dir: str | None,
    config_path: Path | None,
    log_format: str | None,
    log_file: Path | None,
) -> None:
    """Run the controller alone; workers on other machines join with `iris worker start --controller URL`."""
    from iris.cluster.controller.main import ControllerOptions, listen_and_state, run

    options = ControllerOptions(
        host=host,
        port=port,
        state_dir=state_dir,
        backend=backend,
        kubeconfig=kubeconfig,
        namespace=namespace,
        queue=queue,
        tick=tick,
        worker_grace=worker_grace,
        advertise_url=advertise_url,
        also_listen=tuple(also_listen),
        image=image,
        environment_dir=environment_dir,
        config=config_path,
        log_format=log_format,
        log_file=log_file,
    )
    config = None
    if config_path is not None:
        from iris.cluster.config import load_cluster_config

        config = load_cluster_config(config_path)  # errors name the key and the line
    host, port, state_dir = listen_and_state(options, config)
    err_console.print(f"controller starting on http://{host}:{port} (state in {state_dir})")
    try:
        run(options)
    except OSError as exc:
        raise click.ClickException(f"cannot listen on {host}:{port}: {exc.strerror}") from None
