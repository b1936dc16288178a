"""docs/configuration.md is generated from the config models and must match them."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

import iris.cluster.config as config_module
from iris.cluster.config import ConfigModel

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "gen_config_docs.py"


@pytest.fixture(scope="module")
def gen() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gen_config_docs", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def test_committed_reference_matches_the_models() -> None:
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "--check"], capture_output=True, text=True, timeout=60, cwd=ROOT
    )
    assert result.returncode == 0, result.stderr


def test_check_fails_on_a_stale_file(
    gen: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    stale = tmp_path / "configuration.md"
    stale.write_text(gen.render().replace("Hard cap on slices", "Soft cap on slices"))
    monkeypatch.setattr(gen, "OUTPUT", stale)
    assert gen.main(["--check"]) == 1
    assert gen.main([]) == 0
    assert gen.main(["--check"]) == 0


def test_every_config_model_and_field_is_documented(gen: ModuleType) -> None:
    text = gen.render()
    models = [
        obj
        for obj in vars(config_module).values()
        if isinstance(obj, type) and issubclass(obj, ConfigModel) and obj is not ConfigModel
    ]
    documented = {s.model for s in gen.sections()}
    assert set(models) <= documented, set(models) - documented
    for model in models:
        for name, field in model.model_fields.items():
            assert field.description, f"{model.__name__}.{name} has no docstring"
            assert f"| `{name}` |" in text
    assert "(not documented yet)" not in text


def test_types_defaults_and_limits_are_shown(gen: ModuleType) -> None:
    text = gen.render()
    assert "| `max_slices` | integer | `1` | ≥ 0, ≤ 100000 | Hard cap on slices of this group. |" in text
    assert "| `kind` | `worker-daemon` \\| `kubernetes` | `worker-daemon` |" in text
    assert "| `resources` | [resources](#resources) | **required** |" in text
    assert '<a id="scale_groups-name"></a>' in text
