"""The static bundle is complete: every module is preloaded, every import resolves, the vendored
chart library keeps its licence (no browser needed)."""

from __future__ import annotations

import re
from pathlib import Path

from iris.cluster.controller.main import DASHBOARD_DIR

JS = DASHBOARD_DIR / "js"
IMPORT = re.compile(r"""^\s*import\s+(?:[^'"]*?\s+from\s+)?["']([^"']+)["'];""", re.M)


def modules() -> list[Path]:
    return sorted(JS.rglob("*.js"))


def test_every_module_is_preloaded_by_the_index() -> None:
    index = (DASHBOARD_DIR / "index.html").read_text()
    preloaded = set(re.findall(r'<link rel="modulepreload" href="([^"]+)"', index))
    expected = {p.relative_to(DASHBOARD_DIR).as_posix() for p in modules()} - {"js/app.js"}
    assert preloaded == expected
    assert '<script type="module" src="js/app.js">' in index


def test_every_import_resolves_to_a_file() -> None:
    for module in modules():
        for spec in IMPORT.findall(module.read_text()):
            assert spec.startswith("."), (
                f"{module.name} imports {spec!r}: only relative modules, no build step"
            )
            assert (module.parent / spec).resolve().is_file(), f"{module.name} imports a missing {spec}"


def test_vendored_chart_library_keeps_its_licence() -> None:
    vendor = DASHBOARD_DIR / "vendor" / "uplot"
    assert (
        "MIT" in (vendor / "LICENSE").read_text()
        or "Permission is hereby granted" in (vendor / "LICENSE").read_text()
    )
    assert (vendor / "uPlot.iife.min.js").stat().st_size > 10_000
