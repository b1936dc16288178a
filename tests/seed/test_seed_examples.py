"""Every code block of the specification runs verbatim against our package."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

import pytest

from iris.cluster.controller.backend import (
    BackendDescriptor,
    BackendKind,
    DashboardDescriptor,
    TaskTarget,
    dashboard_backend_descriptor,
)
from iris.cluster.controller.controller import create_controller

SEED_CANDIDATES = [
    Path(__file__).parent / "seed_spec.txt",
]


def _seed_text() -> str:
    for path in SEED_CANDIDATES:
        if path.exists():
            return path.read_text()
    raise FileNotFoundError("tests/seed/seed_spec.txt is missing")


def python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", _seed_text(), flags=re.S)


def _block(*needles: str) -> str:
    for block in python_blocks():
        if all(n in block for n in needles):
            return block
    raise AssertionError(f"no seed block contains {needles}")


class _FakeSelf:
    """Records which controller seams a seed block calls."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def __getattr__(self, name: str):  # noqa: ANN204
        return lambda: self.calls.append(name)


def test_the_seed_has_the_blocks_we_run() -> None:
    assert len(python_blocks()) == 9


def test_enum_block_runs_and_matches_ours() -> None:
    ns: dict[str, object] = {}
    exec(_block("class BackendKind(StrEnum)"), ns)
    seed_enum = ns["BackendKind"]
    assert [m.name for m in seed_enum] == [m.name for m in BackendKind]  # type: ignore[attr-defined]
    # The seed prints a typographic hyphen; ours is ASCII.
    assert BackendKind.WORKER.value == "worker-daemon"
    assert BackendKind.KUBERNETES.value == "kubernetes"


@pytest.mark.parametrize("kind", list(BackendKind))
def test_guarded_seam_blocks_call_only_their_kind(kind: BackendKind) -> None:
    worker_block = _block("descriptor.kind is BackendKind.WORKER", "_update_worker_health")
    k8s_block = _block("descriptor.kind is BackendKind.KUBERNETES", "_reconcile_pods")
    descriptor = BackendDescriptor(backend_id="b", kind=kind)
    fake = _FakeSelf()
    exec(worker_block, {"descriptor": descriptor, "self": fake, "BackendKind": BackendKind})
    exec(k8s_block, {"descriptor": descriptor, "self": fake, "BackendKind": BackendKind})
    if kind is BackendKind.WORKER:
        assert fake.calls == ["_update_worker_health", "_trigger_autoscale"]
    else:
        assert fake.calls == ["_reconcile_pods"]


@pytest.mark.parametrize("kind", list(BackendKind))
def test_guarded_seam_blocks_run_on_a_real_controller(kind: BackendKind, tmp_path: Path) -> None:
    controller = create_controller(BackendDescriptor(backend_id="b", kind=kind), state_dir=tmp_path)
    for needles in (("_update_worker_health",), ("_reconcile_pods",)):
        exec(
            _block(*needles),
            {"descriptor": controller.backend_descriptor, "self": controller, "BackendKind": BackendKind},
        )
    assert controller.backend_descriptor.kind is kind


def test_dashboard_block_runs() -> None:
    ns: dict[str, object] = {"BackendKind": BackendKind, "DashboardDescriptor": DashboardDescriptor}
    exec(_block("def dashboard_backend_descriptor(controller)"), ns)
    seed_fn = ns["dashboard_backend_descriptor"]
    worker = create_controller(
        BackendDescriptor(backend_id="w", kind=BackendKind.WORKER, display_name="W"), autoscaler=object()
    )
    k8s = create_controller(BackendDescriptor(backend_id="k", kind=BackendKind.KUBERNETES, display_name="K"))
    assert seed_fn(worker) == dashboard_backend_descriptor(worker)  # type: ignore[operator]
    assert seed_fn(k8s) == dashboard_backend_descriptor(k8s)  # type: ignore[operator]


def test_task_target_blocks_run() -> None:
    ns: dict[str, object] = {"TaskTarget": TaskTarget}
    exec(_block('TaskTarget(address="10.0.0.15:9090")'), ns)
    assert ns["task_target"] == TaskTarget(address="10.0.0.15:9090")
    exec(_block('TaskTarget(attempt_uid="task-abc-123-xyz")'), ns)
    assert ns["task_target"] == TaskTarget(attempt_uid="task-abc-123-xyz")


def test_descriptor_blocks_run_and_freeze_attributes() -> None:
    ns: dict[str, object] = {}
    exec(_block("worker_backend = BackendDescriptor("), ns)
    exec(_block("k8s_backend = BackendDescriptor("), ns)
    worker_backend = ns["worker_backend"]
    k8s_backend = ns["k8s_backend"]
    assert isinstance(worker_backend, BackendDescriptor) and isinstance(k8s_backend, BackendDescriptor)
    assert worker_backend.kind is BackendKind.WORKER
    assert worker_backend.advertised_attributes["gpu"] == frozenset({"v100"})
    assert isinstance(worker_backend.advertised_attributes["gpu"], frozenset)
    assert k8s_backend.scale_groups == frozenset({"high\u2011mem"})
    with pytest.raises(TypeError):
        worker_backend.advertised_attributes["gpu"] = frozenset()  # type: ignore[index]
    with pytest.raises(AttributeError):
        worker_backend.kind = BackendKind.KUBERNETES  # type: ignore[misc]


def _capabilities_output(controller: object) -> str:
    ns: dict[str, object] = {}
    exec(_block("def print_capabilities(controller)"), ns)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        ns["print_capabilities"](controller)  # type: ignore[operator]
    return out.getvalue().strip()


def test_print_capabilities_prints_the_seed_lines() -> None:
    ns: dict[str, object] = {}
    exec(_block("worker_backend = BackendDescriptor("), ns)
    exec(_block("k8s_backend = BackendDescriptor("), ns)
    with_autoscaler = create_controller(ns["worker_backend"], autoscaler=object())  # type: ignore[arg-type]
    without = create_controller(ns["worker_backend"])  # type: ignore[arg-type]
    k8s = create_controller(ns["k8s_backend"])  # type: ignore[arg-type]
    assert (
        _capabilities_output(with_autoscaler)
        == "Backend 'Local Worker Backend' supports: workers, autoscaler"
    )
    assert _capabilities_output(without) == "Backend 'Local Worker Backend' supports: workers"
    assert _capabilities_output(k8s) == "Backend 'K8s Cluster Backend' supports: cluster"


def test_backend_descriptor_cannot_be_replaced() -> None:
    controller = create_controller(BackendDescriptor(backend_id="w", kind=BackendKind.WORKER))
    with pytest.raises(AttributeError):
        controller.backend_descriptor = BackendDescriptor(backend_id="k", kind=BackendKind.KUBERNETES)  # type: ignore[misc]
