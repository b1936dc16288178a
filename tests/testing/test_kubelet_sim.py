"""The kubelet simulator running real local processes for pods."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest
from tests.conftest import wait_until

from iris.testing.conditions import get_condition
from iris.testing.fake_apiserver import EVENTS, NAMESPACES, PODS, FakeApiServer
from iris.testing.kubelet_sim import KubeletSimulator, NodeSpec

NS = "work"


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[tuple[FakeApiServer, KubeletSimulator]]:
    server = FakeApiServer(state_dir=tmp_path / "apiserver").start()
    nodes = [NodeSpec(f"node-{i}", cpu="2", memory="4Gi", labels={"pool": "cpu"}) for i in range(3)]
    kubelet = KubeletSimulator(
        server, nodes, work_dir=tmp_path / "pods", image_pull_backoff_after=0.1
    ).start()
    server.store.create(NAMESPACES, None, {"metadata": {"name": NS}})
    yield server, kubelet
    kubelet.stop()
    server.stop()


def run_pod(server: FakeApiServer, name: str, command: list[str], **extra: Any) -> None:
    container = {
        "name": "main",
        "image": extra.pop("image", "busybox"),
        "command": command,
        **extra.pop("container", {}),
    }
    server.store.create(
        PODS,
        NS,
        {"metadata": {"name": name}, "spec": {"restartPolicy": "Never", "containers": [container], **extra}},
    )


def current(server: FakeApiServer, name: str) -> dict[str, Any] | None:
    return server.store.try_get(PODS, NS, name)


def phase(server: FakeApiServer, name: str) -> str | None:
    pod = current(server, name)
    return (pod or {}).get("status", {}).get("phase")


def terminated_state(server: FakeApiServer, name: str) -> dict[str, Any]:
    return current(server, name)["status"]["containerStatuses"][0]["state"]["terminated"]


def test_failing_command_reports_exit_code_states_and_logs(
    cluster: tuple[FakeApiServer, KubeletSimulator],
) -> None:
    server, _ = cluster
    events = server.subscribe(PODS, NS)
    run_pod(
        server,
        "fails",
        ["sh", "-c", "echo hi; echo $(GREETING) $HOME; exit 3"],
        container={"env": [{"name": "GREETING", "value": "hello"}]},
    )
    wait_until(lambda: phase(server, "fails") == "Failed", timeout=10, what="pod Failed")
    state = terminated_state(server, "fails")
    assert (state["exitCode"], state["reason"]) == (3, "Error") and state["finishedAt"]
    pod = current(server, "fails")
    assert (
        pod["spec"]["nodeName"].startswith("node-") and get_condition(pod, "PodScheduled")["status"] == "True"
    )
    seen = []
    for event in events.drain():
        statuses = event.object.get("status", {}).get("containerStatuses") or []
        if statuses:
            state_name = next(iter(statuses[0]["state"]))
            reason = statuses[0]["state"][state_name].get("reason", "")
            if not seen or seen[-1] != (state_name, reason):
                seen.append((state_name, reason))
    events.close()
    assert seen == [("waiting", "ContainerCreating"), ("running", ""), ("terminated", "Error")]
    log = httpx.get(f"{server.url}/api/v1/namespaces/{NS}/pods/fails/log").text
    lines = log.splitlines()
    assert lines[0] == "hi" and lines[1].startswith("hello /") and lines[1].endswith(pod["metadata"]["uid"])


def test_successful_pod_and_followed_logs(cluster: tuple[FakeApiServer, KubeletSimulator]) -> None:
    server, _ = cluster
    run_pod(server, "counts", ["sh", "-c", "for i in 1 2 3; do echo line $i; sleep 0.05; done"])
    wait_until(lambda: phase(server, "counts") in ("Running", "Succeeded"), timeout=10)
    with httpx.stream(
        "GET", f"{server.url}/api/v1/namespaces/{NS}/pods/counts/log", params={"follow": "true"}, timeout=10
    ) as response:
        followed = [line for line in response.iter_lines() if line]
    assert followed == ["line 1", "line 2", "line 3"]
    wait_until(lambda: phase(server, "counts") == "Succeeded", timeout=10)
    assert terminated_state(server, "counts")["reason"] == "Completed"


def test_deleting_a_pod_kills_its_process_tree(cluster: tuple[FakeApiServer, KubeletSimulator]) -> None:
    server, kubelet = cluster
    run_pod(server, "sleeper", ["sh", "-c", "sleep 300 & sleep 300 & wait"])
    wait_until(lambda: phase(server, "sleeper") == "Running", timeout=10)
    pid = wait_until(lambda: kubelet.pid_of(NS, "sleeper"), timeout=5)

    def tree() -> list[int] | None:
        children = psutil.Process(pid).children(recursive=True)
        return [pid, *(c.pid for c in children)] if len(children) == 2 else None

    processes = wait_until(tree, timeout=5, what="both background sleeps started")
    server.store.delete(PODS, NS, "sleeper", grace_period_seconds=5)
    wait_until(
        lambda: current(server, "sleeper") is None, timeout=10, what="pod removed after its processes died"
    )
    assert not [p for p in processes if _alive(p)]


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE  # zombies await a reaper, they do not run
    except psutil.NoSuchProcess:
        return False


def test_node_selector_mismatch_stays_pending_with_reason(
    cluster: tuple[FakeApiServer, KubeletSimulator],
) -> None:
    server, _ = cluster
    run_pod(server, "picky", ["true"], nodeSelector={"pool": "gpu"})
    condition = wait_until(lambda: get_condition(current(server, "picky"), "PodScheduled"), timeout=5)
    assert (condition["status"], condition["reason"]) == ("False", "Unschedulable")
    assert (
        condition["message"]
        == "0/3 nodes are available: 3 node(s) didn't match Pod's node affinity/selector."
    )
    assert phase(server, "picky") == "Pending" and "nodeName" not in current(server, "picky")["spec"]
    events = server.store.list(
        EVENTS, NS, field_selector="involvedObject.name=picky,reason=FailedScheduling"
    ).items
    assert [e["message"] for e in events] == [condition["message"]], "explained once, in an Event too"


def test_missing_image_backs_off(cluster: tuple[FakeApiServer, KubeletSimulator]) -> None:
    server, _ = cluster
    run_pod(server, "noimage", ["true"], image="registry.example/does-not-exist:1")

    def waiting_reason() -> str:
        statuses = (current(server, "noimage") or {}).get("status", {}).get("containerStatuses") or [{}]
        return statuses[0].get("state", {}).get("waiting", {}).get("reason", "")

    wait_until(lambda: waiting_reason() == "ErrImagePull", timeout=5)
    wait_until(lambda: waiting_reason() == "ImagePullBackOff", timeout=5)
    assert phase(server, "noimage") == "Pending"


def test_memory_limit_is_enforced_as_oom_kill(cluster: tuple[FakeApiServer, KubeletSimulator]) -> None:
    server, _ = cluster
    hog = "import time; x = bytearray(256 * 1024 * 1024); time.sleep(30)"
    run_pod(server, "hog", ["python3", "-c", hog], container={"resources": {"limits": {"memory": "64Mi"}}})
    wait_until(lambda: phase(server, "hog") == "Failed", timeout=15, what="OOM kill")
    state = terminated_state(server, "hog")
    assert (state["exitCode"], state["reason"]) == (137, "OOMKilled")


def test_active_deadline(cluster: tuple[FakeApiServer, KubeletSimulator]) -> None:
    server, _ = cluster
    run_pod(server, "slow", ["sleep", "30"], activeDeadlineSeconds=1)
    wait_until(lambda: phase(server, "slow") == "Failed", timeout=10)
    assert current(server, "slow")["status"]["reason"] == "DeadlineExceeded"


def test_resources_fill_nodes_then_queue(cluster: tuple[FakeApiServer, KubeletSimulator]) -> None:
    server, _ = cluster
    for i in range(4):
        run_pod(server, f"big-{i}", ["sleep", "30"], container={"resources": {"requests": {"cpu": "2"}}})
    wait_until(lambda: sum(phase(server, f"big-{i}") == "Running" for i in range(4)) == 3, timeout=10)
    waiting = next(f"big-{i}" for i in range(4) if phase(server, f"big-{i}") == "Pending")
    message = wait_until(
        lambda: (get_condition(current(server, waiting), "PodScheduled") or {}).get("message"), timeout=5
    )
    assert message == "0/3 nodes are available: 3 Insufficient cpu."
    running = next(f"big-{i}" for i in range(4) if phase(server, f"big-{i}") == "Running")
    server.store.delete(PODS, NS, running, grace_period_seconds=1)
    wait_until(
        lambda: phase(server, waiting) == "Running", timeout=10, what="queued pod takes the freed node"
    )
