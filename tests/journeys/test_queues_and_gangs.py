"""Backend-neutral journeys about capacity: a job that waits for room, a higher band taking a lower
one's place, failed gang generations giving their resources back, and a large callable — on WORKER
and the real Kubernetes control plane, with the same assertions.

On Kubernetes the capacity is the ClusterQueue's quota and Kueue decides who waits and who is
preempted; on WORKER it is the workers' CPUs and the Iris scheduler decides.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.journeys.harness import SUBSTRATE_PARAMS, Journey, substrate_cluster
from tests.journeys.test_job_model import SMALL, finished

from iris.client import CoschedulingConfig, Entrypoint, Job, JobState, PriorityBand, ResourceSpec, TaskState

TWO_CPUS = ResourceSpec(cpu=2, memory="64MB")


@pytest.fixture(scope="module", params=SUBSTRATE_PARAMS)
def j(request: pytest.FixtureRequest) -> Iterator[Journey]:
    # A gang places one task per worker: four workers for the 4-task gang (8 CPUs, like the
    # real control plane's two 4-CPU nodes).
    with substrate_cluster(request, workers=4, attributes=[{"pool": "a"}] * 4) as journey:
        yield journey


def hold_until(release: Path) -> Entrypoint:
    """A first attempt that runs until ``release`` exists (every substrate runs its tasks on this
    machine); any later attempt ends at once."""
    script = (
        f'if [ "$IRIS_ATTEMPT_NUMBER" = 0 ]; then while [ ! -e {release} ]; do sleep 0.2; done; fi; echo done'
    )
    return Entrypoint.from_command("sh", "-c", script)


def fill_the_cluster(j: Journey, release: Path, name: str, priority: PriorityBand) -> Job:
    slots = int(j.cpu_capacity() // 2)
    assert slots >= 2, f"the journeys need room for two 2-CPU tasks, not {j.cpu_capacity()} CPUs"
    job = j.client.submit(
        hold_until(release), name=name, replicas=slots, priority=priority, resources=TWO_CPUS
    )
    j.step(
        lambda: sum(t.state is TaskState.RUNNING for t in job.tasks()) == slots,
        what=f"{name} fills the cluster",
    )
    return job


def iris_cli(j: Journey, *args: str) -> str:
    env = {**os.environ, "IRIS_CONTROLLER_URL": j.cluster.url, "COLUMNS": "400"}
    done = subprocess.run(
        [sys.executable, "-m", "iris.cli.main", *args], capture_output=True, text=True, env=env, timeout=60
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_a_job_over_the_free_capacity_waits_with_the_reason_shown(j: Journey, tmp_path: Path) -> None:
    release = tmp_path / "release"
    hog = fill_the_cluster(j, release, "hog", PriorityBand.INTERACTIVE)
    waiter = j.client.submit(Entrypoint.from_command("true"), name="waiter", resources=TWO_CPUS)
    j.step(lambda: "cpu" in (waiter.tasks()[0].pending_reason or ""), what="the reason names cpu")
    reason = waiter.tasks()[0].pending_reason or ""
    if j.kube is not None:
        # Kueue's own words, e.g. "insufficient unused quota for cpu in flavor iris-default, 2 more needed"
        assert "waiting for Kueue admission" in reason and "quota for cpu" in reason, reason
    status = iris_cli(j, "job", "status", waiter.job_id)
    assert reason in status, status
    assert waiter.tasks()[0].state in (TaskState.PENDING, TaskState.ASSIGNED)
    release.touch()
    assert j.step(lambda: finished(j, hog), what="hog done").state is JobState.SUCCEEDED
    assert j.step(lambda: finished(j, waiter), what="waiter ran").state is JobState.SUCCEEDED


def test_a_higher_band_preempts_a_lower_one_which_later_completes(j: Journey, tmp_path: Path) -> None:
    release = tmp_path / "release"
    batch = fill_the_cluster(j, release, "batch", PriorityBand.BATCH)
    prod = j.client.submit(
        Entrypoint.from_command("true"), name="prod", priority=PriorityBand.PRODUCTION, resources=TWO_CPUS
    )
    assert j.step(lambda: finished(j, prod), what="production job done").state is JobState.SUCCEEDED
    release.touch()
    detail = j.step(lambda: finished(j, batch), what="batch job done")
    assert detail.state is JobState.SUCCEEDED
    displaced = [t for t in detail.tasks if len(t.attempts) > 1]
    assert len(displaced) == 1, [[a.state for a in t.attempts] for t in detail.tasks]
    task = displaced[0]
    # Kueue's preemption (TerminationTarget: WorkloadEvictedDueToPreempted, or its "Stopped" event
    # once the pod is gone) is PREEMPTED, as the Iris scheduler's is: it spends the preemption
    # budget and never the failure budget.
    assert task.attempts[0].state is TaskState.PREEMPTED
    assert task.preemption_count == 1 and task.failure_count == 0
    assert task.attempts[-1].state is TaskState.SUCCEEDED


def test_failed_gang_generations_give_their_resources_back(j: Journey) -> None:
    """A 4-task gang whose first member fails three times (retries allowed) finishes; then
    nothing is held: no CPU reserved (Kueue's flavorsReservation), no pod left Terminating."""
    script = (
        'if [ "$IRIS_ATTEMPT_NUMBER" -lt 3 ]; then'
        ' if [ "$IRIS_TASK_INDEX" = 0 ]; then sleep 0.5; exit 1; fi; sleep 60; fi; echo ok'
    )
    job = j.client.submit(
        Entrypoint.from_command("sh", "-c", script),
        name="gang-fails-thrice",
        replicas=4,
        resources=SMALL,
        coscheduling=CoschedulingConfig(group_by="pool"),
        max_retries_failure=3,
    )
    detail = j.step(lambda: finished(j, job), timeout=180, what="gang done")
    assert detail.state is JobState.SUCCEEDED
    assert [len(t.attempts) for t in detail.tasks] == [4, 4, 4, 4]
    assert [a.state for a in detail.tasks[0].attempts] == [TaskState.FAILED] * 3 + [TaskState.SUCCEEDED]
    j.step(lambda: j.cpu_in_use() == 0, timeout=60, what="no CPU held after the gang")
    j.step(lambda: not j.stuck_pods(), timeout=60, what="no pod left Terminating")


def _echo_size(blob: bytes) -> None:
    print(f"blob of {len(blob)} bytes", flush=True)


def test_a_large_callable_reaches_its_task(j: Journey) -> None:
    """A pickle far over what a pod object may carry (etcd) still runs: the pod fetches it."""
    job = j.client.submit(Entrypoint.from_callable(_echo_size, b"x" * 1_500_000), name="big", resources=SMALL)
    assert j.step(lambda: finished(j, job), what="big callable done").state is JobState.SUCCEEDED
    assert job.logs() == ["blob of 1500000 bytes"]


@pytest.mark.parametrize("j", SUBSTRATE_PARAMS[1:], indirect=True)
def test_kubectl_shows_what_iris_job_status_says(j: Journey, tmp_path: Path) -> None:
    """`kubectl get pods,workloads` and `iris job status` tell the same story (KUBERNETES only)."""
    assert j.kube is not None
    release = tmp_path / "release"
    runner = j.client.submit(hold_until(release), name="pair", replicas=2, resources=SMALL)
    j.step(lambda: all(t.state is TaskState.RUNNING for t in runner.tasks()), what="both tasks running")
    too_big = ResourceSpec(cpu=float(j.cpu_capacity()) + 1, memory="64MB")
    waiter = j.client.submit(Entrypoint.from_command("true"), name="too-big", resources=too_big)
    j.step(lambda: "quota for cpu" in (waiter.tasks()[0].pending_reason or ""), what="Kueue's reason")

    def by_kubectl() -> tuple[dict[str, dict], dict[str, dict]]:
        items = json.loads(j.kube.run("get", "pods,workloads", "-o", "json"))["items"]  # type: ignore[union-attr]
        pods = {p["metadata"]["annotations"]["iris.attempt_uid"]: p for p in items if p["kind"] == "Pod"}
        workloads = {
            owner["name"]: w
            for w in items
            if w["kind"] == "Workload"
            for owner in w["metadata"].get("ownerReferences") or []
        }
        return pods, workloads

    def disagreements() -> list[str]:
        """Where kubectl's objects and `iris job status` tell different stories (both read now)."""
        pods, workloads = by_kubectl()
        found: list[str] = []
        for job in (runner, waiter):
            shown = json.loads(iris_cli(j, "job", "status", job.job_id, "--json"))
            for task in shown["tasks"]:
                pod = pods.get(task["current_attempt_uid"])
                workload = workloads.get(pod["metadata"]["name"]) if pod else None
                if pod is None or workload is None:
                    found.append(f"{task['task_id']}: pod {pod is not None}, workload {workload is not None}")
                    continue
                conditions = {c["type"]: c for c in workload["status"].get("conditions") or []}
                if task["state"] == "RUNNING":
                    ok = pod["status"]["phase"] == "Running" and conditions["Admitted"]["status"] == "True"
                else:
                    quota = conditions.get("QuotaReserved") or {}
                    ok = (
                        task["state"] == "ASSIGNED"
                        and pod["status"]["phase"] == "Pending"
                        and any(
                            g["name"] == "kueue.x-k8s.io/admission" for g in pod["spec"]["schedulingGates"]
                        )
                        and quota.get("status") == "False"
                        and quota.get("message", "\0") in (task["pending_reason"] or "")
                    )
                if not ok:
                    found.append(
                        f"{task['task_id']}: iris {task}, pod {pod['status']}, workload {conditions}"
                    )
        return found

    # Kueue and the controller each write on their own schedule: the two views must meet, and stay
    # met, within a step (a snapshot between two writes may see one of them only).
    last: list[str] = []

    def agree() -> bool:
        last[:] = disagreements()
        return not last

    try:
        j.step(agree, what="kubectl and iris job status telling the same story")
    except AssertionError as exc:
        raise AssertionError(f"{exc}\nlast disagreements: {last}") from None
    release.touch()
    assert j.step(lambda: finished(j, runner), what="pair done").state is JobState.SUCCEEDED
    waiter.kill()
    shown = json.loads(iris_cli(j, "job", "status", runner.job_id, "--json"))
    pods, _ = by_kubectl()
    assert {pods[t["current_attempt_uid"]]["status"]["phase"] for t in shown["tasks"]} == {"Succeeded"}
    j.step(
        lambda: waiter.tasks()[0].current_attempt_uid not in by_kubectl()[0], what="the killed job's pod gone"
    )
