"""Loading cluster config files: examples load, mistakes are reported with key path and line."""

from __future__ import annotations

from pathlib import Path

import pytest

import iris.cluster.config as config_module
from iris.cluster.config import (
    ClusterConfig,
    ConfigModel,
    ScaleGroupConfig,
    load_cluster_config,
    parse_cluster_config,
)
from iris.rpc.errors import InvalidArgument

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@pytest.mark.parametrize("name", ["local.yaml", "multi-group.yaml"])
def test_examples_load(name: str) -> None:
    config = load_cluster_config(EXAMPLES / name)
    assert isinstance(config, ClusterConfig)
    assert config.autoscaler_enabled
    for key, group in config.scale_groups.items():
        assert group.name == key
        assert group.min_slices <= group.max_slices


def test_local_example_matches_its_description() -> None:
    config = load_cluster_config(EXAMPLES / "local.yaml")
    (group,) = config.scale_groups.values()
    assert (group.min_slices, group.max_slices, group.resources.cpu_millicores) == (0, 3, 1000)
    assert config.platform.kind == "local"
    assert config.defaults.autoscaler.evaluation_interval_s <= 2
    assert not str(config.controller.state_dir).startswith("~")


def test_multi_group_example_orders_groups_by_priority() -> None:
    config = load_cluster_config(EXAMPLES / "multi-group.yaml")
    groups = config.group_list()
    assert [g.name for g in groups] == ["spot", "on-demand"]
    assert groups[0].attributes != groups[1].attributes
    assert groups[1].worker_attributes("on-demand-3") == {
        "capacity": "on-demand",
        "zone": "b",
        "scale-group": "on-demand",
        "slice": "on-demand-3",
    }


def _error(text: str, tmp_path: Path) -> str:
    path = tmp_path / "cluster.yaml"
    path.write_text(text)
    with pytest.raises(InvalidArgument) as info:
        load_cluster_config(path)
    return info.value.message


GOOD_GROUP = """\
scale_groups:
  gpu:
    resources:
      cpu: 8
      memory: 32GB
      device: {type: gpu, variant: h100, count: 8}
    max_slices: 4
"""


def test_unknown_key_is_rejected_with_its_line(tmp_path: Path) -> None:
    text = GOOD_GROUP + "    max_slice: 3\n"
    message = _error(text, tmp_path)
    assert message.startswith("cluster.yaml line 8: scale_groups.gpu.max_slice: unknown key")
    assert "did you mean 'max_slices'?" in message


def test_unknown_top_level_section(tmp_path: Path) -> None:
    message = _error("controller:\n  port: 1\nautoscaler: {}\n", tmp_path)
    assert message.startswith("cluster.yaml line 3: autoscaler: unknown key")
    assert "allowed keys: name, controller, backend, platform, scale_groups, defaults, auth" in message


def test_bad_type_names_key_and_line(tmp_path: Path) -> None:
    text = GOOD_GROUP.replace("max_slices: 4", "max_slices: lots")
    message = _error(text, tmp_path)
    assert message.startswith(
        "cluster.yaml line 7: scale_groups.gpu.max_slices: Input should be a valid integer"
    )


def test_bad_quantity_in_resources(tmp_path: Path) -> None:
    message = _error(GOOD_GROUP.replace("memory: 32GB", "memory: lots"), tmp_path)
    assert message.startswith("cluster.yaml line 3: scale_groups.gpu.resources: not a size: 'lots'")


def test_unknown_resource_key_lists_the_friendly_names(tmp_path: Path) -> None:
    message = _error(GOOD_GROUP.replace("memory: 32GB", "ram: 32GB"), tmp_path)
    assert "line 5: scale_groups.gpu.resources.ram: unknown key" in message
    assert "allowed keys: cpu, memory, disk, device" in message


def test_every_problem_is_reported(tmp_path: Path) -> None:
    text = "controller:\n  port: -1\nplatform:\n  kind: cloud\n"
    lines = _error(text, tmp_path).splitlines()
    assert lines[0].startswith(
        "cluster.yaml line 2: controller.port: Input should be greater than or equal to 0"
    )
    assert lines[1].startswith(
        "cluster.yaml line 4: platform.kind: Input should be 'local', 'manual' or 'fake'"
    )


def test_cross_field_rules(tmp_path: Path) -> None:
    text = GOOD_GROUP.replace("max_slices: 4", "max_slices: 1\n    min_slices: 2")
    assert _error(text, tmp_path) == (
        "cluster.yaml line 2: scale_groups.gpu: min_slices (2) is larger than max_slices (1)"
    )
    k8s = "backend:\n  kind: kubernetes\n" + GOOD_GROUP
    assert (
        "cluster.yaml line 3: scale_groups: scale groups apply to the worker-daemon backend only"
        in _error(k8s, tmp_path)
    )
    manual = "platform:\n  kind: manual\n"
    assert "cluster.yaml line 1: platform: kind: manual needs a 'manual: {hosts: [...]}' section" in _error(
        manual, tmp_path
    )
    bad_name = GOOD_GROUP.replace("  gpu:", "  GPU_big:")
    assert "bad scale group name 'GPU_big'" in _error(bad_name, tmp_path)
    reserved = GOOD_GROUP + "    attributes: {scale-group: x}\n"
    assert "attribute 'scale-group' is set by Iris itself" in _error(reserved, tmp_path)


def test_yaml_problems(tmp_path: Path) -> None:
    assert _error("controller:\n  port: [1\n", tmp_path).startswith("cluster.yaml line 3: not valid YAML")
    assert (
        _error("controller:\n  port: 1\n  port: 2\n", tmp_path)
        == "cluster.yaml line 3: key 'port' appears twice"
    )
    assert (
        _error("- a\n- b\n", tmp_path)
        == "cluster.yaml line 1: the cluster config must be a mapping of sections"
    )


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(InvalidArgument, match="cannot read cluster config"):
        load_cluster_config(tmp_path / "nope.yaml")


def test_empty_file_gives_defaults() -> None:
    config = parse_cluster_config("")
    assert config.backend.kind == "worker-daemon"
    assert config.scale_groups == {}
    assert config.controller.state_dir == Path.home() / ".iris" / "state"
    assert not config.autoscaler_enabled


def test_auth_tokens() -> None:
    config = parse_cluster_config(
        "auth:\n  tokens:\n    - {token: s3cret-admin, role: admin}\n    - {token: s3cret-alice, role: user, user: alice}\n"
    )
    assert [t.role for t in config.auth.tokens] == ["admin", "user"]
    with pytest.raises(
        InvalidArgument, match="line 3: auth.tokens.0: a token with role 'user' needs a 'user' name"
    ):
        parse_cluster_config("auth:\n  tokens:\n    - {token: s3cret-bob1, role: user}\n")


def test_fields_are_documented() -> None:
    """Field docstrings are the configuration reference: every field of every section has one."""
    models = [m for m in vars(config_module).values() if isinstance(m, type) and issubclass(m, ConfigModel)]
    assert ScaleGroupConfig in models and len(models) > 10
    for model in models:
        for name, field in model.model_fields.items():
            assert field.description, f"{model.__name__}.{name}"
