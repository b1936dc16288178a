"""The controller's shell stays split by responsibility (DESIGN §3, issue 25): controller.py is the
loop's owner and wiring only, and no controller module grows past a size a newcomer can read."""

from __future__ import annotations

from pathlib import Path

import iris.cluster.controller as controller_package

ROOT = Path(controller_package.__file__).parent


def _lines(path: Path) -> int:
    return len(path.read_text().splitlines())


def test_controller_py_is_thin() -> None:
    assert _lines(ROOT / "controller.py") <= 500


def test_no_controller_module_is_over_800_lines() -> None:
    big = {str(p.relative_to(ROOT)): n for p in ROOT.rglob("*.py") if (n := _lines(p)) > 800}
    assert big == {}


def test_the_store_is_a_package_and_no_module_shadows_a_builtin() -> None:
    assert (ROOT / "store" / "__init__.py").is_file() and not (ROOT / "store.py").exists()
    assert not (ROOT / "round.py").exists()
