"""build_pod: labels, annotations, Kueue gang and priority, resources, placement, command."""

from __future__ import annotations

import base64
import json
import os
import re
import subprocess
import sys
from typing import Any

import cloudpickle
import kubernetes_validate
import pytest

from iris.cluster.backends.kubernetes.config import KubernetesBackendConfig
from iris.cluster.backends.kubernetes.naming import is_label_value, pod_name
from iris.cluster.backends.kubernetes.pods import (
    CALLABLE_BOOTSTRAP,
    CALLABLE_INLINE_MAX,
    PodSpecError,
    build_pod,
)
from iris.rpc.enums import PriorityBand
from iris.rpc.models import (
    Constraint,
    CoschedulingConfig,
    DeviceSpec,
    Entrypoint,
    EnvironmentSpec,
    ResourceSpec,
    RunSpec,
)

K8S_VERSION = "1.31"
CONFIG = KubernetesBackendConfig(namespace="iris", local_queue="team-q", service_account="iris-task")


def run_spec(**overrides: Any) -> RunSpec:
    fields: dict[str, Any] = {
        "attempt_uid": "0123456789abcdef",
        "attempt_number": 2,
        "job_id": "/alice/train",
        "task_id": "/alice/train/3",
        "task_index": 3,
        "entrypoint": Entrypoint.from_command("python", "train.py", "--lr", "0.1"),
        "resources": ResourceSpec(cpu=0.5, memory="2GB"),
        "env": {"WANDB_MODE": "offline", "IRIS_JOB_ID": "spoofed"},
    }
    fields.update(overrides)
    return RunSpec(**fields)


def build(spec: RunSpec, config: KubernetesBackendConfig = CONFIG) -> dict[str, Any]:
    return build_pod(spec, config, controller_url="http://iris:10000", backend_id="k8s-prod")


def env_of(pod: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e["value"] for e in pod["spec"]["containers"][0]["env"]}


def test_pod_is_valid_kubernetes() -> None:
    gang = run_spec(
        replicas=4,
        coscheduling=CoschedulingConfig(group_by="pool"),
        resources=ResourceSpec(cpu=8, memory="32GB", disk="100GB", device=DeviceSpec(type="gpu", count=2)),
        constraints=[
            Constraint(key="pool", value="a"),
            Constraint(key="zone", op="IN", values=["x", "y"]),
            Constraint(key="gen", op="GE", value="3"),
            Constraint(key="example.com/flaky", op="NOT_EXISTS"),
        ],
        environment=EnvironmentSpec(pip_packages=["numpy==2.0"], env_vars={"A": "1"}),
    )
    for spec in (run_spec(), gang):
        kubernetes_validate.validate(build(spec), K8S_VERSION, strict=True)


def test_identity_labels_and_annotations() -> None:
    pod = build(run_spec())
    meta = pod["metadata"]
    assert (
        meta["name"]
        == pod_name("/alice/train/3", "0123456789abcdef")
        == "alice-train-3-0123456789abcdef-task"
    )
    assert meta["namespace"] == "iris"
    labels = meta["labels"]
    assert labels["iris.managed"] == "true"
    assert labels["iris.backend_id"] == "k8s-prod"
    assert labels["iris.job_id"] == "alice.train"
    assert labels["iris.task_id"] == "alice.train.3"
    assert labels["iris.attempt_uid"] == "0123456789abcdef"
    assert labels["kueue.x-k8s.io/queue-name"] == "team-q"
    assert all(is_label_value(v) for v in labels.values())
    assert meta["annotations"]["iris.job_id"] == "/alice/train"
    assert meta["annotations"]["iris.task_id"] == "/alice/train/3"
    assert meta["annotations"]["iris.attempt_uid"] == "0123456789abcdef"
    spec = pod["spec"]
    assert spec["restartPolicy"] == "Never"
    assert spec["serviceAccountName"] == "iris-task"
    assert spec["containers"][0]["name"] == "task"
    assert spec["containers"][0]["image"] == "python:3.11-slim"
    assert spec["containers"][0]["command"] == ["python", "train.py", "--lr", "0.1"]


@pytest.mark.parametrize(
    ("band", "name"),
    [
        (PriorityBand.PRODUCTION, "iris-production"),
        (PriorityBand.INTERACTIVE, "iris-interactive"),
        (PriorityBand.BATCH, "iris-batch"),
    ],
)
def test_priority_band(band: PriorityBand, name: str) -> None:
    pod = build(run_spec(priority=band))
    assert pod["metadata"]["labels"]["kueue.x-k8s.io/priority-class"] == name
    assert pod["spec"]["priorityClassName"] == name


def test_priority_mapping_is_overridable() -> None:
    config = KubernetesBackendConfig(priority_classes={PriorityBand.BATCH: "spot"})
    batch = build(run_spec(priority=PriorityBand.BATCH), config)
    assert batch["spec"]["priorityClassName"] == "spot"
    prod = build(run_spec(priority=PriorityBand.PRODUCTION), config)
    assert "priorityClassName" not in prod["spec"]
    assert "kueue.x-k8s.io/priority-class" not in prod["metadata"]["labels"]


def test_gang_gets_pod_group() -> None:
    pod = build(run_spec(replicas=4, coscheduling=CoschedulingConfig(group_by="pool")))
    group = pod["metadata"]["labels"]["kueue.x-k8s.io/pod-group-name"]
    assert group.startswith("alice-train-") and is_label_value(group)
    assert pod["metadata"]["annotations"]["kueue.x-k8s.io/pod-group-total-count"] == "4"
    # Iris replaces a failed gang by a new generation, never a member in place: Kueue must finish
    # the group's Workload (releasing quota and finalizers) once no member is active.
    assert pod["metadata"]["annotations"]["kueue.x-k8s.io/retriable-in-group"] == "false"
    sibling = build(
        run_spec(
            task_id="/alice/train/0",
            task_index=0,
            replicas=4,
            coscheduling=CoschedulingConfig(group_by="pool"),
        )
    )
    assert sibling["metadata"]["labels"]["kueue.x-k8s.io/pod-group-name"] == group


def test_a_gang_member_knows_its_rank_and_learns_the_coordinator_before_it_starts() -> None:
    spec = run_spec(
        replicas=4, gang_size=4, gang_generation=5, coscheduling=CoschedulingConfig(group_by="pool")
    )
    pod = build(spec)
    env = env_of(pod)
    port = env["MASTER_PORT"]
    assert {k: env[k] for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "NODE_RANK", "JAX_PROCESS_ID")} == {
        "RANK": "3",
        "WORLD_SIZE": "4",
        "LOCAL_RANK": "0",
        "NODE_RANK": "3",
        "JAX_PROCESS_ID": "3",
    }
    assert env["JAX_NUM_PROCESSES"] == "4" and 20000 <= int(port) < 30000
    # The address comes from the rendezvous init container's file, sourced before the task runs.
    assert "MASTER_ADDR" not in env and env["IRIS_GANG_ENV"] == "/iris-gang/env.sh"
    container = pod["spec"]["containers"][0]
    assert container["command"][:2] == ["sh", "-c"] and container["command"][-4:] == [
        "python",
        "train.py",
        "--lr",
        "0.1",
    ]
    (rendezvous,) = [c for c in pod["spec"]["initContainers"] if c["name"] == "gang-rendezvous"]
    init_env = {e["name"]: e.get("value", e.get("valueFrom")) for e in rendezvous["env"]}
    assert init_env["IRIS_POD_IP"] == {"fieldRef": {"fieldPath": "status.podIP"}}
    assert init_env["IRIS_GANG_GENERATION"] == "5" and init_env["MASTER_PORT"] == port
    assert init_env["IRIS_GANG_ENDPOINT"] == "coordinator/alice/train"
    # A retried gang (a new generation) gets another port.
    assert env_of(build(spec.model_copy(update={"gang_generation": 6})))["MASTER_PORT"] != port
    # A task without a gang has no rendezvous and runs its own command.
    plain = build(run_spec())
    assert "initContainers" not in plain["spec"] and "RANK" not in env_of(plain)
    assert plain["spec"]["containers"][0]["command"] == ["python", "train.py", "--lr", "0.1"]


@pytest.mark.parametrize(
    "spec",
    [run_spec(replicas=4), run_spec(replicas=1, coscheduling=CoschedulingConfig(group_by="pool"))],
    ids=["replicas-without-coscheduling", "coscheduling-single-replica"],
)
def test_no_pod_group_without_a_real_gang(spec: RunSpec) -> None:
    pod = build(spec)
    assert "kueue.x-k8s.io/pod-group-name" not in pod["metadata"]["labels"]
    assert "kueue.x-k8s.io/pod-group-total-count" not in pod["metadata"]["annotations"]
    assert "kueue.x-k8s.io/retriable-in-group" not in pod["metadata"]["annotations"]


def test_resources() -> None:
    pod = build(
        run_spec(
            resources=ResourceSpec(cpu=0.5, memory="2GB", disk="10GB", device=DeviceSpec(type="gpu", count=2))
        )
    )
    res = pod["spec"]["containers"][0]["resources"]
    assert res["requests"] == {
        "cpu": "500m",
        "memory": "2000000000",
        "ephemeral-storage": "10000000000",
        "nvidia.com/gpu": "2",
    }
    assert res["limits"] == {
        "memory": "2000000000",
        "ephemeral-storage": "10000000000",
        "nvidia.com/gpu": "2",
    }


def test_zero_resources_are_left_out() -> None:
    res = build(run_spec(resources=ResourceSpec(cpu=0, memory=0)))["spec"]["containers"][0]["resources"]
    assert res == {}


def test_unknown_device_type_is_a_spec_error() -> None:
    with pytest.raises(PodSpecError, match="device type 'fpga'"):
        build(run_spec(resources=ResourceSpec(device=DeviceSpec(type="fpga"))))


def test_constraints_become_node_selector_and_affinity() -> None:
    pod = build(
        run_spec(
            constraints=[
                Constraint(key="pool", value="a"),
                Constraint(key="topology.kubernetes.io/zone", value="us-east1-b"),
                Constraint(key="tier", op="NE", value="spot"),
                Constraint(key="gen", op="LE", value="4"),
                Constraint(key="gpu", op="EXISTS"),
            ]
        )
    )
    spec = pod["spec"]
    assert spec["nodeSelector"] == {"pool": "a", "topology.kubernetes.io/zone": "us-east1-b"}
    terms = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"
    ]
    assert terms == [
        {
            "matchExpressions": [
                {"key": "tier", "operator": "NotIn", "values": ["spot"]},
                {"key": "gen", "operator": "Lt", "values": ["5"]},
                {"key": "gpu", "operator": "Exists"},
            ]
        }
    ]


def test_preferences_become_equally_weighted_preferred_node_affinity() -> None:
    """--prefer ranks nodes (the kube-scheduler scores each term met), never requires one."""
    spec = build(
        run_spec(
            constraints=[Constraint(key="pool", value="a")],
            preferences=[
                Constraint(key="topology.kubernetes.io/zone", value="us-east1-b"),
                Constraint(key="gen", op="GE", value="4"),
            ],
        )
    )["spec"]
    affinity = spec["affinity"]["nodeAffinity"]
    assert "requiredDuringSchedulingIgnoredDuringExecution" not in affinity
    assert affinity["preferredDuringSchedulingIgnoredDuringExecution"] == [
        {
            "weight": 10,
            "preference": {
                "matchExpressions": [
                    {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["us-east1-b"]}
                ]
            },
        },
        {
            "weight": 10,
            "preference": {"matchExpressions": [{"key": "gen", "operator": "Gt", "values": ["3"]}]},
        },
    ]
    assert spec["nodeSelector"] == {"pool": "a"}


def test_a_preference_that_is_not_a_node_label_is_a_spec_error() -> None:
    with pytest.raises(PodSpecError, match="not a valid Kubernetes node label key"):
        build(run_spec(preferences=[Constraint(key="bad key!", value="x")]))


def test_only_eq_constraints_means_no_affinity() -> None:
    spec = build(run_spec(constraints=[Constraint(key="pool", value="a")]))["spec"]
    assert "affinity" not in spec


@pytest.mark.parametrize(
    "constraint",
    [
        Constraint(key="bad key!", value="a"),
        Constraint(key="pool", value="not a label value!"),
        Constraint(key="mem", op="GT", value="1.5"),
    ],
)
def test_inexpressible_constraints_are_spec_errors(constraint: Constraint) -> None:
    with pytest.raises(PodSpecError):
        build(run_spec(constraints=[constraint]))


def test_env_contract() -> None:
    env = env_of(build(run_spec(environment=EnvironmentSpec(env_vars={"WANDB_MODE": "online"}))))
    assert env["WANDB_MODE"] == "online"  # environment vars layer over the job env
    assert env["IRIS_JOB_ID"] == "/alice/train"  # the Iris contract cannot be overridden
    assert env["IRIS_CONTROLLER_URL"] == "http://iris:10000"
    assert env["IRIS_TASK_ID"] == "/alice/train/3"
    assert env["IRIS_TASK_INDEX"] == "3"
    assert env["IRIS_ATTEMPT_UID"] == "0123456789abcdef"
    assert env["IRIS_ATTEMPT_NUMBER"] == "2"


def test_a_pod_mounts_only_its_own_users_environments() -> None:
    """One user's pod never mounts the node's whole environment directory (every user's builds and
    uv cache), read-only or not: only that user's part, so it cannot plant code in another's."""
    config = KubernetesBackendConfig(environment_dir="/var/cache/iris/envs")
    environment = EnvironmentSpec(pip_packages=["numpy"])
    paths: dict[str, list[str]] = {}
    for user in ("alice", "bob", "../alice", "", "Eve.Smith-2"):
        pod = build(run_spec(environment=environment, user=user), config)
        kubernetes_validate.validate(pod, K8S_VERSION, strict=True)
        paths[user] = [v["hostPath"]["path"] for v in pod["spec"]["volumes"] if "hostPath" in v]
    assert paths["alice"] == ["/var/cache/iris/envs/users/alice"]
    assert paths["bob"] == ["/var/cache/iris/envs/users/bob"]
    assert paths["Eve.Smith-2"] == ["/var/cache/iris/envs/users/Eve.Smith-2"]
    for odd in ("../alice", ""):  # not a plain name: a hashed directory of its own, under users/
        [path] = paths[odd]
        assert re.fullmatch(r"/var/cache/iris/envs/users/_[0-9a-f]{32}", path), path
    assert len({p for ps in paths.values() for p in ps}) == len(paths)

    # Offline: the operator's pre-warmed uv cache, read-only and for the build only (it copies it).
    offline = KubernetesBackendConfig(environment_dir="/var/cache/iris/envs", environment_offline=True)
    pod = build(run_spec(environment=environment, user="alice"), offline)
    kubernetes_validate.validate(pod, K8S_VERSION, strict=True)
    assert {v["name"]: v["hostPath"]["path"] for v in pod["spec"]["volumes"] if "hostPath" in v} == {
        "iris-envs": "/var/cache/iris/envs/users/alice",
        "iris-uv-seed": "/var/cache/iris/envs/.uv-cache",
    }
    [init] = pod["spec"]["initContainers"]
    [task] = pod["spec"]["containers"]
    assert {"name": "iris-uv-seed", "mountPath": "/iris-uv-seed", "readOnly": True} in init["volumeMounts"]
    assert all(m["name"] != "iris-uv-seed" for m in task["volumeMounts"])


def test_an_environment_is_built_by_an_init_container_and_mounted_read_only() -> None:
    config = KubernetesBackendConfig(
        environment_dir="/var/cache/iris/envs", environment_uv="/usr/local/bin/uv"
    )
    spec = run_spec(
        environment=EnvironmentSpec(pip_packages=["numpy==2.0", "a b"], project=True, extras=["gpu"]),
        bundle_id="ab" * 32,
        image="ghcr.io/me/train:1",
        resources=ResourceSpec(cpu=2, memory="2GB", device=DeviceSpec(type="gpu", count=1)),
        user="alice",
    )
    pod = build(spec, config)
    kubernetes_validate.validate(pod, K8S_VERSION, strict=True)
    inits = pod["spec"]["initContainers"]
    assert [i["name"] for i in inits] == ["fetch-bundle", "build-env"]  # the lock comes with the bundle
    init = inits[1]
    [task] = pod["spec"]["containers"]
    assert init["image"] == task["image"] == "ghcr.io/me/train:1"  # built with the task image's python3
    assert init["command"][:2] == ["python3", "-c"]
    env = {e["name"]: e.get("value") for e in init["env"]}
    assert json.loads(env["IRIS_ENV_REQUIREMENTS"]) == ["a b", "numpy==2.0"]
    assert json.loads(env["IRIS_ENV_EXTRAS"]) == ["gpu"] and env["IRIS_ENV_PROJECT"] == "1"
    assert env["IRIS_WORKDIR"] == "/workspace" and env["IRIS_ENV_UV"] == "/opt/iris-uv/uv"
    assert not any(name.startswith("IRIS_TOKEN") for name in env)  # the build never sees a credential
    assert "nvidia.com/gpu" not in json.dumps(init["resources"])  # the task's cpu and memory, not its GPU
    assert init["resources"]["limits"] == {"memory": "2000000000"}
    assert init["securityContext"]["allowPrivilegeEscalation"] is False
    volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
    assert volumes["iris-envs"]["hostPath"] == {
        "path": "/var/cache/iris/envs/users/alice",  # alice's own part of the node's cache only
        "type": "DirectoryOrCreate",
    }
    assert volumes["iris-uv"]["hostPath"] == {"path": "/usr/local/bin/uv", "type": "File"}
    init_mounts = {m["mountPath"]: m for m in init["volumeMounts"]}
    assert not init_mounts["/iris-envs"].get("readOnly") and init_mounts["/workspace"]["readOnly"]
    task_mounts = {m["mountPath"]: m for m in task["volumeMounts"]}
    assert task_mounts["/iris-envs"]["readOnly"] and task_mounts["/iris-env"]["readOnly"]
    assert not task_mounts["/workspace"].get("readOnly")
    # The task enters the environment the init container named, then becomes the command.
    assert task["command"][:2] == ["sh", "-c"] and "IRIS_PROJECT_PATH" in task["command"][2]
    assert task["command"][3:] == ["iris-env", "python", "train.py", "--lr", "0.1"]
    assert env_of(pod)["IRIS_ENV_STATE"] == "/iris-env"
    # No pip in the image is needed: nothing runs `pip install` in the task container any more.
    assert "pip install" not in json.dumps(task)


def test_a_job_without_packages_or_project_gets_no_environment_init_container() -> None:
    pod = build(run_spec(environment=EnvironmentSpec(env_vars={"A": "1"})))
    assert "initContainers" not in pod["spec"]
    assert pod["spec"]["containers"][0]["command"] == ["python", "train.py", "--lr", "0.1"]


def test_the_environment_wrapper_enters_the_environment(tmp_path: Any) -> None:
    """The task command's wrapper, run by a real sh: the build's log, then the task on its PATH."""
    state = tmp_path / "state"
    (state).mkdir()
    env_dir = tmp_path / "envs" / "abc"
    (env_dir / "bin").mkdir(parents=True)
    (env_dir / "bin" / "hello").write_text("#!/bin/sh\necho hello from $VIRTUAL_ENV\n")
    (env_dir / "bin" / "hello").chmod(0o755)
    (state / "path").write_text(str(env_dir))
    (state / "log").write_text("reusing environment abc on node-0\n")
    pod = build(
        run_spec(entrypoint=Entrypoint.from_command("hello"), environment=EnvironmentSpec(pip_packages=["x"]))
    )
    command = [arg.replace("$$", "$") for arg in pod["spec"]["containers"][0]["command"]]
    out = subprocess.run(
        command,
        env={"PATH": os.defpath, "IRIS_ENV_STATE": str(state)},
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert out.splitlines() == ["reusing environment abc on node-0", f"hello from {env_dir}"]


def _double(x: int) -> None:
    if x * 2 != 42:
        raise SystemExit(3)


@pytest.mark.parametrize(("arg", "code"), [(21, 0), (1, 3)])
def test_callable_entrypoint_runs_from_the_pod_command(arg: int, code: int) -> None:
    """Run the rendered command and env exactly as the kubelet would, in a local process."""
    pod = build(run_spec(entrypoint=Entrypoint.from_callable(_double, arg)))
    container = pod["spec"]["containers"][0]
    assert container["command"] == ["python3", "-c", CALLABLE_BOOTSTRAP]
    env = {**os.environ, **env_of(pod)}
    payload = base64.b64decode(env["IRIS_CALLABLE_B64"])
    assert cloudpickle.loads(payload)[1] == (arg,)
    argv = [sys.executable, *container["command"][1:]]
    done = subprocess.run(argv, env=env, capture_output=True, timeout=60)
    assert done.returncode == code, done.stderr.decode()


def test_a_large_callable_is_fetched_not_carried_in_the_pod() -> None:
    """etcd bounds the size of one object: a big pickle must not ride in the pod's env."""
    pod = build(run_spec(entrypoint=Entrypoint.from_callable(_double, b"x" * 2_000_000)))
    container = pod["spec"]["containers"][0]
    assert "IRIS_CALLABLE_B64" not in env_of(pod)
    assert container["command"] == ["python3", "-c", CALLABLE_BOOTSTRAP]
    assert ":callable" in CALLABLE_BOOTSTRAP and "IRIS_TOKEN" in CALLABLE_BOOTSTRAP
    assert len(json.dumps(pod)) < CALLABLE_INLINE_MAX + 16_384


def test_dollar_signs_reach_the_task_unchanged() -> None:
    """Kubernetes expands $(VAR) and $$ in commands and env values; Iris must not let it."""
    from iris.testing.kubelet_sim.container_env import expand

    argv = ("sh", "-c", "echo $$ $(IRIS_JOB_ID) $HOME $$(x)")
    pod = build(run_spec(entrypoint=Entrypoint.from_command(*argv), env={"PRICE": "$(5) $$"}))
    container = pod["spec"]["containers"][0]
    env = env_of(pod)
    assert [expand(a, env) for a in container["command"]] == list(argv)
    assert expand(env["PRICE"], env) == "$(5) $$"


def test_host_runner_mounts_this_machines_iris_into_callable_pods_only() -> None:
    """``host_runner`` (a local real node): the runner's packages and the site-packages are
    read-only hostPath volumes where the container runtime puts them, and the rendered command
    runs with only those on its path; a command's pod gets none of it."""
    from iris.cluster.runtime.container import RUNNER_DIR, runner_packages, worker_site_packages

    config = CONFIG.model_copy(update={"host_runner": True})
    pod = build(run_spec(entrypoint=Entrypoint.from_callable(_double, 21)), config)
    container = pod["spec"]["containers"][0]
    volumes = {v["name"]: v["hostPath"]["path"] for v in pod["spec"]["volumes"]}
    mounts = {m["mountPath"]: volumes[m["name"]] for m in container["volumeMounts"] if m.get("readOnly")}
    assert mounts[f"{RUNNER_DIR}/iris"] == runner_packages()["iris"]
    assert mounts[f"{RUNNER_DIR}/cloudpickle"] == runner_packages()["cloudpickle"]
    assert sorted(set(mounts.values())) == sorted({*runner_packages().values(), *worker_site_packages()})
    env = env_of(pod)
    assert env["PYTHONPATH"] == RUNNER_DIR
    kubernetes_validate.validate(pod, K8S_VERSION, strict=True)
    command = build(run_spec(), config)
    assert "volumes" not in command["spec"] and "PYTHONPATH" not in env_of(command)
    assert "volumes" not in build(run_spec(entrypoint=Entrypoint.from_callable(_double, 21)))["spec"]
