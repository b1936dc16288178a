"""The engine CLI runs as the worker (root): nothing a task or a build chooses may become the CLI's
own environment (where it looks for programs, libraries, its config, plugins or its daemon)."""

from __future__ import annotations

from iris.cluster.runtime.container import ContainerTaskRuntime, steers_the_cli

WORKER_ENV = {"PATH": "/usr/sbin:/usr/bin", "HOME": "/root", "DOCKER_HOST": "unix:///run/docker.sock"}


def test_a_build_containers_home_and_path_reach_the_container_not_the_cli() -> None:
    runtime = ContainerTaskRuntime("w", cli="/usr/bin/docker", env=WORKER_ENV)
    chosen = {"HOME": "/envs/.cache-abc", "PATH": "/opt/image/bin:/usr/bin", "DOCKER_CONFIG": "/tmp/x",
              "LD_PRELOAD": "/tmp/x.so", "UV_INDEX_URL": "https://index.example/simple"}  # fmt: skip
    argv, cli_env = runtime.one_off_argv("img", ["true"], name="n", mounts=[], env=chosen, user=200001)
    assert {k: cli_env.get(k) for k in ("PATH", "HOME", "DOCKER_HOST")} == WORKER_ENV
    assert "DOCKER_CONFIG" not in cli_env and "LD_PRELOAD" not in cli_env
    for key in ("HOME", "PATH", "DOCKER_CONFIG", "LD_PRELOAD"):
        assert f"{key}={chosen[key]}" in argv  # the container still gets them
    # A variable the CLI does not read keeps its value off the command line.
    assert cli_env["UV_INDEX_URL"] == chosen["UV_INDEX_URL"] and "UV_INDEX_URL" in argv


def test_which_names_steer_the_cli() -> None:
    for name in ("PATH", "HOME", "LD_PRELOAD", "DOCKER_CONFIG", "XDG_CONFIG_HOME", "https_proxy",
                 "CONTAINERS_CONF", "GODEBUG", "SSL_CERT_FILE", "TMPDIR"):  # fmt: skip
        assert steers_the_cli(name), name
    for name in ("MY_TOKEN", "CUDA_VISIBLE_DEVICES", "PYTHONPATH", "UV_INDEX_URL", "WANDB_API_KEY"):
        assert not steers_the_cli(name), name
