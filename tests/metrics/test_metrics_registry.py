"""Each controller has its own registry; state gauges always list every state."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from iris.cluster.controller.backend import BackendDescriptor, BackendKind
from iris.cluster.controller.controller import Controller, create_controller
from iris.cluster.controller.metrics import TASK_STATES, CountsReader
from iris.rpc.models import Entrypoint, JobSpec


def _controller() -> Controller:
    descriptor = BackendDescriptor(backend_id="t", kind=BackendKind.WORKER, display_name="t")
    controller = create_controller(descriptor)
    controller.metrics.watch_state(CountsReader(controller))
    return controller


def _samples(controller: Controller) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = controller.metrics.exposition().decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def test_two_controllers_in_one_process_do_not_share_series() -> None:
    a, b = _controller(), _controller()
    spec = JobSpec(name="j", entrypoint=Entrypoint.from_command("true"), replicas=2, user="u")
    a.submit(spec)
    a.metrics.dispatch_latency_seconds.observe(0.01)
    sa, sb = _samples(a), _samples(b)
    assert sa[("iris_tasks", (("state", "PENDING"),))] == 2
    assert sb[("iris_tasks", (("state", "PENDING"),))] == 0
    assert sa[("iris_dispatch_latency_seconds_count", ())] == 1
    assert sb[("iris_dispatch_latency_seconds_count", ())] == 0


def test_every_task_state_is_listed_even_at_zero() -> None:
    samples = _samples(_controller())
    listed = {dict(labels)["state"] for (name, labels) in samples if name == "iris_tasks"}
    assert listed == set(TASK_STATES)
    assert "MISSING" not in listed  # a protocol sentinel, never stored


def test_watching_twice_replaces_the_source() -> None:
    controller = _controller()
    controller.metrics.watch_state(CountsReader(controller))
    text = controller.metrics.exposition().decode()
    assert text.count('iris_tasks{state="PENDING"}') == 1
