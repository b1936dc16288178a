"""KueueSimulator: admits gated pods against ClusterQueue quota, like Kueue's pod integration.

Shell around ``quota.plan_admission``: an informer cache of pods and Kueue objects, one
admission cycle per batch of changes, and the effects a real Kueue has — remove the admission
gate, mirror a ``Workload`` per pod or pod group with Kueue's conditions, evict (condition
``TerminationTarget`` with Kueue's stop reason, then delete the whole group), finish Workloads and
strip Kueue's finalizer by the pod-group rules of ``lifecycle``.
"""

from __future__ import annotations

import copy
import hashlib
import itertools
import logging
import threading
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from iris.testing.conditions import set_condition
from iris.testing.events import record_pod_event
from iris.testing.fake_apiserver import (
    CLUSTER_QUEUES,
    LOCAL_QUEUES,
    PATCH_JSON,
    PODS,
    RESOURCE_FLAVORS,
    WORKLOAD_PRIORITY_CLASSES,
    WORKLOADS,
    ApiError,
    FakeApiServer,
)
from iris.testing.informer import Informer
from iris.testing.k8s_quantity import format_quantity, parse_quantity, pod_requests, sum_quantities
from iris.testing.kueue_sim.lifecycle import Finish, any_running, pods_to_let_go, workload_finish
from iris.testing.kueue_sim.names import (
    ADMISSION_GATE,
    EVICTION_STOP_PREFIX,
    MANAGED_FINALIZER,
    POD_GROUP_NAME_LABEL,
    POD_GROUP_TOTAL_COUNT_ANNOTATION,
    PREEMPTION_REASON,
    PRIORITY_CLASS_LABEL,
    QUEUE_NAME_LABEL,
    TERMINATION_TARGET,
)
from iris.testing.kueue_sim.quota import (
    NEVER,
    POD_SET,
    Candidate,
    Flavor,
    QueueSpec,
    ResourceGroup,
    plan_admission,
)
from iris.testing.kueue_sim.webhook import gate_queued_pods

_TERMINAL = ("Succeeded", "Failed")
log = logging.getLogger(__name__)
WorkloadKey = tuple[str, str]  # (namespace, workload name)


@dataclass
class _Workload:
    """What the simulator remembers about one workload between cycles."""

    namespace: str
    name: str
    queue_name: str
    order: int
    assignment: dict[str, str] | None = None
    cluster_queue: str = ""
    requests: dict[str, Fraction] = field(default_factory=dict)
    eviction: tuple[str, str] | None = None  # (reason, message) once evicted
    finished: Finish | None = None  # once set, for good (Kueue never reopens a Workload)
    group: bool = False
    written: dict[str, Any] | None = None  # last Workload status written


def _is_terminal(pod: dict[str, Any]) -> bool:
    return (pod.get("status") or {}).get("phase") in _TERMINAL


def _is_gated(pod: dict[str, Any]) -> bool:
    return any(g.get("name") == ADMISSION_GATE for g in (pod.get("spec") or {}).get("schedulingGates") or [])


def _workload_name(pod: dict[str, Any]) -> str:
    labels = pod["metadata"].get("labels") or {}
    if group := labels.get(POD_GROUP_NAME_LABEL):
        return group
    digest = hashlib.sha256(pod["metadata"]["uid"].encode()).hexdigest()[:5]
    return f"pod-{pod['metadata']['name'][:240]}-{digest}"


def queue_spec_from_object(cluster_queue: dict[str, Any]) -> QueueSpec:
    spec = cluster_queue.get("spec") or {}
    groups = []
    for group in spec.get("resourceGroups") or []:
        flavors = tuple(
            Flavor(
                f["name"],
                {r["name"]: parse_quantity(r.get("nominalQuota", 0)) for r in f.get("resources") or []},
            )
            for f in group.get("flavors") or []
        )
        groups.append(ResourceGroup(frozenset(group.get("coveredResources") or []), flavors))
    return QueueSpec(
        cluster_queue["metadata"]["name"],
        tuple(groups),
        ((spec.get("preemption") or {}).get("withinClusterQueue")) or NEVER,
        spec.get("queueingStrategy") or "BestEffortFIFO",
    )


class KueueSimulator:
    """Plays Kueue against a FakeApiServer from a background thread. ``start()`` / ``stop()``."""

    def __init__(self, server: FakeApiServer, *, add_finalizer: bool = True) -> None:
        self.server = server
        self.add_finalizer = add_finalizer
        self._lock = threading.RLock()
        self._wakeup = threading.Event()
        self._stopping = threading.Event()
        self._order = itertools.count()
        self._workloads: dict[WorkloadKey, _Workload] = {}
        self._informers: list[Informer] = []
        self._thread = threading.Thread(target=self._run, name="kueue-sim", daemon=True)

    def _gate(self, resource: Any, obj: dict[str, Any]) -> None:
        gate_queued_pods(resource, obj, add_finalizer=self.add_finalizer)

    def start(self) -> KueueSimulator:
        self.server.add_admission_hook(self._gate)
        self._pods = Informer(self.server, PODS, self._wakeup)
        self._cluster_queues = Informer(self.server, CLUSTER_QUEUES, self._wakeup)
        self._local_queues = Informer(self.server, LOCAL_QUEUES, self._wakeup)
        self._flavors = Informer(self.server, RESOURCE_FLAVORS, self._wakeup)
        self._priority_classes = Informer(self.server, WORKLOAD_PRIORITY_CLASSES, self._wakeup)
        self._informers = [
            self._pods,
            self._cluster_queues,
            self._local_queues,
            self._flavors,
            self._priority_classes,
        ]
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()
        self._wakeup.set()
        self.server.store.remove_admission_hook(self._gate)
        if self._thread.is_alive():
            self._thread.join(timeout=5)
        for informer in self._informers:
            informer.close()

    def _run(self) -> None:
        while not self._stopping.is_set():
            self._wakeup.wait(timeout=1.0)
            self._wakeup.clear()
            if self._stopping.is_set():
                return
            try:
                self.run_cycle()
            except ApiError as exc:  # a write raced with a client: look again shortly
                log.warning("kueue-sim cycle: %s", exc.message)
                self._stopping.wait(0.05)
                self._wakeup.set()
            except Exception:
                log.exception("kueue-sim cycle failed")
                self._stopping.wait(0.5)
                self._wakeup.set()

    # ----- test-facing API ----------------------------------------------------------------------

    def evict(
        self,
        pod_name: str,
        *,
        namespace: str | None = None,
        reason: str = PREEMPTION_REASON,
        message: str = "Preempted to accommodate a workload (UID: test) due to prioritization in the ClusterQueue",
    ) -> list[str]:
        """Evict the workload of ``pod_name`` (its whole pod group), as Kueue preemption does.

        ``reason`` is the Workload's Evicted reason (Kueue's are Preempted, PodsReadyTimeout,
        AdmissionCheck, ClusterQueueStopped, Deactivated, NodeFailures). Each running member gets
        ``TerminationTarget=True`` with reason ``WorkloadEvictedDueTo<reason>`` and ``message``,
        then is deleted. Returns the pod names deleted. ``namespace`` may be omitted when the pod
        name is unique.
        """
        with self._lock:
            self._sync()
            matches = [
                p
                for (ns, name), p in self._pods.cache.items()
                if name == pod_name and namespace in (None, ns)
            ]
            if len(matches) != 1:
                raise KeyError(f"{len(matches)} pods named {pod_name!r} (namespace {namespace!r})")
            pod = matches[0]
            key = (pod["metadata"]["namespace"], _workload_name(pod))
            workload = self._workloads.get(key)
            if workload is None:
                workload = self._remember(key, pod)
            return self._evict(workload, reason, message)

    def workload_name_for(self, pod: dict[str, Any]) -> str:
        return _workload_name(pod)

    # ----- the cycle ----------------------------------------------------------------------------

    def _sync(self) -> None:
        for informer in self._informers:
            informer.sync()

    def _remember(self, key: WorkloadKey, pod: dict[str, Any]) -> _Workload:
        labels = pod["metadata"].get("labels") or {}
        workload = _Workload(
            key[0],
            key[1],
            labels.get(QUEUE_NAME_LABEL, ""),
            next(self._order),
            group=POD_GROUP_NAME_LABEL in labels,
        )
        self._workloads[key] = workload
        return workload

    def run_cycle(self) -> None:
        """One admission pass over everything the informers hold (idempotent: writes only changes)."""
        with self._lock:
            self._sync()
            members: dict[WorkloadKey, list[dict[str, Any]]] = {}
            for pod in sorted(self._pods.cache.values(), key=lambda p: int(p["metadata"]["resourceVersion"])):
                if QUEUE_NAME_LABEL in (pod["metadata"].get("labels") or {}):
                    members.setdefault((pod["metadata"]["namespace"], _workload_name(pod)), []).append(pod)
            for key in [k for k in self._workloads if k not in members]:
                self._forget(self._workloads.pop(key))
            for key, pods in members.items():
                if key not in self._workloads:
                    self._remember(key, pods[0])
                self._settle(self._workloads[key], pods)
            candidates, blocked = self._candidates(members)
            plan = plan_admission(self._queue_specs(), candidates)
            admitted_now = {_split(k) for k in plan.admit}
            for candidate_key, assignment in plan.admit.items():
                key = _split(candidate_key)
                self._admit(self._workloads[key], members[key], assignment)
            for victim, preemptor in plan.evict.items():
                message = f"Preempted to accommodate a workload ({preemptor}) due to prioritization in the ClusterQueue"
                self._evict(self._workloads[_split(victim)], PREEMPTION_REASON, message)
            pending = {**blocked, **{_split(k): ("Pending", m) for k, m in plan.pending.items()}}
            for key, workload in self._workloads.items():
                pods = members[key]
                if (
                    workload.assignment is not None
                    and workload.eviction is None
                    and workload.finished is None
                    and key not in admitted_now
                ):
                    for pod in pods:
                        if _is_gated(pod):  # a replacement member of an admitted group
                            self._ungate(pod, workload.assignment)
                self._write_workload(workload, pods, pending.get(key))
                self._release_finalizers(workload, pods)
            holding = {_split(c.key) for c in candidates if c.assignment is not None} | admitted_now
            self._write_queue_status(holding, set(pending))

    def _queue_specs(self) -> dict[str, QueueSpec]:
        return {
            cq["metadata"]["name"]: queue_spec_from_object(cq)
            for cq in self._cluster_queues.cache.values()
            if not cq["metadata"].get("deletionTimestamp")
        }

    def _candidates(
        self, members: dict[WorkloadKey, list[dict[str, Any]]]
    ) -> tuple[list[Candidate], dict[WorkloadKey, tuple[str, str]]]:
        """Workloads for the planner, and (reason, message) for those that cannot even be considered."""
        queues = self._queue_specs()
        blocked: dict[WorkloadKey, tuple[str, str]] = {}
        candidates: list[Candidate] = []
        for key, pods in members.items():
            workload = self._workloads[key]
            if workload.finished is not None:
                continue
            if workload.assignment is not None:  # quota is held until the Workload finishes
                candidates.append(
                    self._candidate(key, workload, workload.requests, workload.assignment, pods)
                )
                continue
            live = [p for p in pods if not _is_terminal(p) and not p["metadata"].get("deletionTimestamp")]
            if not any(_is_gated(p) for p in live):
                continue
            local_queue = self._local_queues.cache.get((workload.namespace, workload.queue_name))
            if local_queue is None:
                blocked[key] = ("Inadmissible", f"LocalQueue {workload.queue_name} doesn't exist")
                continue
            cluster_queue = (local_queue.get("spec") or {}).get("clusterQueue", "")
            if cluster_queue not in queues:
                blocked[key] = ("Inadmissible", f"ClusterQueue {cluster_queue} doesn't exist")
                continue
            workload.cluster_queue = cluster_queue
            total = self._total_count(pods)
            if len(live) < total:
                blocked[key] = (
                    "Pending",
                    f"waiting for all pods of group {workload.name} to be created ({len(live)}/{total})",
                )
                continue
            try:
                requests = sum_quantities([pod_requests(p) for p in live])
            except ValueError as exc:
                blocked[key] = ("Pending", f"invalid resource request: {exc}")
                continue
            candidates.append(self._candidate(key, workload, requests, None, pods))
        return candidates, blocked

    def _candidate(
        self,
        key: WorkloadKey,
        workload: _Workload,
        requests: dict[str, Fraction],
        assignment: dict[str, str] | None,
        pods: list[dict[str, Any]],
    ) -> Candidate:
        return Candidate(
            key=f"{key[0]}/{key[1]}",
            queue=workload.cluster_queue,
            priority=self._priority(pods[0]),
            order=workload.order,
            requests=requests,
            assignment=assignment,
            evicting=workload.eviction is not None,
        )

    @staticmethod
    def _total_count(pods: list[dict[str, Any]]) -> int:
        for pod in pods:
            value = (pod["metadata"].get("annotations") or {}).get(POD_GROUP_TOTAL_COUNT_ANNOTATION)
            if value and value.isdigit():
                return int(value)
        return 1

    def _priority(self, pod: dict[str, Any]) -> int:
        name = (pod["metadata"].get("labels") or {}).get(PRIORITY_CLASS_LABEL)
        if name and (wpc := self._priority_classes.cache.get(("", name))) is not None:
            return int(wpc.get("value") or 0)
        return int((pod.get("spec") or {}).get("priority") or 0)

    def _settle(self, workload: _Workload, pods: list[dict[str, Any]]) -> None:
        """Finish the Workload when Kueue would, and free an evicted one's quota once nothing runs."""
        if workload.finished is None:
            workload.finished = workload_finish(pods, group=workload.group, total=self._total_count(pods))
        if workload.finished is not None:
            workload.assignment = None
        elif workload.eviction is not None and workload.assignment is not None:
            if not (workload.group and any_running(pods)):
                workload.assignment = None

    # ----- effects ------------------------------------------------------------------------------

    def _admit(self, workload: _Workload, pods: list[dict[str, Any]], assignment: dict[str, str]) -> None:
        live = [p for p in pods if not _is_terminal(p) and not p["metadata"].get("deletionTimestamp")]
        workload.assignment = dict(assignment)
        workload.eviction = None
        workload.requests = sum_quantities([pod_requests(p) for p in live])
        for pod in live:
            if _is_gated(pod):
                self._ungate(pod, assignment)

    def _ungate(self, pod: dict[str, Any], assignment: dict[str, str]) -> None:
        node_labels: dict[str, str] = {}
        for flavor_name in set(assignment.values()):
            flavor = self._flavors.cache.get(("", flavor_name)) or {}
            node_labels.update((flavor.get("spec") or {}).get("nodeLabels") or {})

        def mutate(current: dict[str, Any]) -> dict[str, Any]:
            spec = current["spec"]
            gates = [g for g in spec.get("schedulingGates") or [] if g.get("name") != ADMISSION_GATE]
            if gates:
                spec["schedulingGates"] = gates
            else:
                spec.pop("schedulingGates", None)
            if node_labels:
                spec["nodeSelector"] = {**node_labels, **(spec.get("nodeSelector") or {})}
            return current

        meta = pod["metadata"]
        try:
            self.server.store.update(PODS, meta["namespace"], meta["name"], mutate)
        except ApiError as exc:
            if exc.code != 404:
                raise

    def _evict(self, workload: _Workload, reason: str, message: str) -> list[str]:
        workload.eviction = (reason, message)
        store = self.server.store
        deleted = []
        for pod in list(self._pods.cache.values()):
            meta = pod["metadata"]
            if (
                meta["namespace"] != workload.namespace
                or _workload_name(pod) != workload.name
                or _is_terminal(pod)
                or _is_gated(pod)  # Kueue stops only members that may run
                or meta.get("deletionTimestamp")
            ):
                continue

            def mark(current: dict[str, Any]) -> dict[str, Any]:
                status = current.setdefault("status", {})
                status["conditions"] = set_condition(
                    status.get("conditions"),
                    TERMINATION_TARGET,
                    "True",
                    EVICTION_STOP_PREFIX + reason,
                    message,
                )
                return current

            try:
                store.update(PODS, meta["namespace"], meta["name"], mark, subresource="status")
                record_pod_event(store, pod, "Normal", "Stopped", message, "kueue-pod-controller")
                store.delete(PODS, meta["namespace"], meta["name"])
                deleted.append(meta["name"])
            except ApiError as exc:
                if exc.code != 404:
                    raise
        return deleted

    def _forget(self, workload: _Workload) -> None:
        if workload.written is None:
            return
        try:
            self.server.store.delete(WORKLOADS, workload.namespace, workload.name)
        except ApiError as exc:
            if exc.code != 404:
                raise

    def _workload_status(
        self, workload: _Workload, pods: list[dict[str, Any]], pending: tuple[str, str] | None
    ) -> dict[str, Any]:
        previous = copy.deepcopy(workload.written or {})
        conditions = previous.get("conditions")
        status: dict[str, Any] = {}
        if workload.finished is not None:
            outcome = "Succeeded" if workload.finished.success else "Failed"
            conditions = set_condition(conditions, "Finished", "True", outcome, workload.finished.message)
            if previous.get("admission"):
                status["admission"] = previous["admission"]
        elif workload.assignment is not None:
            count = max(len(pods), 1)
            conditions = set_condition(
                conditions,
                "QuotaReserved",
                "True",
                "QuotaReserved",
                f"Quota reserved in ClusterQueue {workload.cluster_queue}",
            )
            conditions = set_condition(conditions, "Admitted", "True", "Admitted", "The workload is admitted")
            status["admission"] = {
                "clusterQueue": workload.cluster_queue,
                "podSetAssignments": [
                    {
                        "name": POD_SET,
                        "flavors": dict(workload.assignment),
                        "resourceUsage": {r: format_quantity(a) for r, a in workload.requests.items()},
                        "count": count,
                    }
                ],
            }
        elif workload.eviction is not None:
            message = workload.eviction[1]
            conditions = set_condition(conditions, "QuotaReserved", "False", "Pending", message)
            conditions = set_condition(
                conditions, "Admitted", "False", "NoReservation", "The workload has no reservation"
            )
            conditions = set_condition(conditions, "Requeued", "True", workload.eviction[0], message)
        elif pending:
            conditions = set_condition(conditions, "QuotaReserved", "False", pending[0], pending[1])
        if workload.eviction is not None:
            reason, message = workload.eviction
            conditions = set_condition(conditions, "Evicted", "True", reason, message)
            if reason == "Preempted":
                conditions = set_condition(conditions, "Preempted", "True", "InClusterQueue", message)
        status["conditions"] = conditions or []
        return status

    def _write_workload(
        self, workload: _Workload, pods: list[dict[str, Any]], pending: tuple[str, str] | None
    ) -> None:
        """Mirror the workload's state into its Workload object (recreated if someone deleted it)."""
        status = self._workload_status(workload, pods, pending)
        store = self.server.store
        exists = store.exists(WORKLOADS, workload.namespace, workload.name)
        if status == workload.written and exists:
            return
        if not exists:
            store.create(WORKLOADS, workload.namespace, self._workload_object(workload, pods[0], pods))
        store.update(
            WORKLOADS,
            workload.namespace,
            workload.name,
            lambda current: {**current, "status": status},
            subresource="status",
        )
        workload.written = status

    def _workload_object(
        self, workload: _Workload, first: dict[str, Any], pods: list[dict[str, Any]]
    ) -> dict[str, Any]:
        labels = first["metadata"].get("labels") or {}
        spec: dict[str, Any] = {
            "queueName": workload.queue_name,
            "active": True,
            "priority": self._priority(first),
            "podSets": [
                {
                    "name": POD_SET,
                    "count": self._total_count(pods),
                    "template": {"spec": first.get("spec") or {}},
                }
            ],
        }
        if PRIORITY_CLASS_LABEL in labels:
            spec["priorityClassName"] = labels[PRIORITY_CLASS_LABEL]
            spec["priorityClassSource"] = "kueue.x-k8s.io/workloadpriorityclass"
        elif (first.get("spec") or {}).get("priorityClassName"):
            spec["priorityClassName"] = first["spec"]["priorityClassName"]
            spec["priorityClassSource"] = "scheduling.k8s.io/priorityclass"
        owners = [
            {"apiVersion": "v1", "kind": "Pod", "name": p["metadata"]["name"], "uid": p["metadata"]["uid"]}
            for p in pods
        ]
        return {
            "metadata": {"name": workload.name, "namespace": workload.namespace, "ownerReferences": owners},
            "spec": spec,
        }

    def _release_finalizers(self, workload: _Workload, pods: list[dict[str, Any]]) -> None:
        """Kueue lets go of members by the rules of ``lifecycle.pods_to_let_go``."""
        let_go = pods_to_let_go(
            pods, group=workload.group, total=self._total_count(pods), finished=workload.finished is not None
        )
        for pod in let_go:
            meta = pod["metadata"]
            finalizers = meta.get("finalizers") or []
            index = finalizers.index(MANAGED_FINALIZER)
            patch = [
                {"op": "test", "path": f"/metadata/finalizers/{index}", "value": MANAGED_FINALIZER},
                {"op": "remove", "path": f"/metadata/finalizers/{index}"},
            ]
            try:
                self.server.store.patch(PODS, meta["namespace"], meta["name"], patch, PATCH_JSON)
            except ApiError as exc:
                if exc.code not in (404, 422):
                    raise
                self._wakeup.set()

    def _write_queue_status(self, holding: set[WorkloadKey], pending: set[WorkloadKey]) -> None:
        """Counts and usage on ClusterQueues and LocalQueues, as ``kubectl get cq,lq`` shows them."""
        admitted: dict[tuple[str, str], int] = {}
        waiting: dict[tuple[str, str], int] = {}
        usage: dict[str, dict[tuple[str, str], Fraction]] = {}
        for key in holding | pending:
            workload = self._workloads[key]
            counter = admitted if key in holding else waiting
            for queue in (("", workload.cluster_queue), (workload.namespace, workload.queue_name)):
                counter[queue] = counter.get(queue, 0) + 1
            if key in holding and workload.assignment is not None:
                cq_usage = usage.setdefault(workload.cluster_queue, {})
                for resource, amount in workload.requests.items():
                    slot = (workload.assignment.get(resource, ""), resource)
                    cq_usage[slot] = cq_usage.get(slot, Fraction(0)) + amount
        for informer, resource in (
            (self._cluster_queues, CLUSTER_QUEUES),
            (self._local_queues, LOCAL_QUEUES),
        ):
            for (namespace, name), obj in list(informer.cache.items()):
                status = dict(obj.get("status") or {})
                status["pendingWorkloads"] = waiting.get((namespace, name), 0)
                status["admittedWorkloads"] = admitted.get((namespace, name), 0)
                status["reservingWorkloads"] = admitted.get((namespace, name), 0)
                if resource == CLUSTER_QUEUES:
                    by_flavor: dict[str, list[dict[str, str]]] = {}
                    for (flavor, res), amount in sorted(usage.get(name, {}).items()):
                        by_flavor.setdefault(flavor, []).append(
                            {"name": res, "total": format_quantity(amount)}
                        )
                    status["flavorsUsage"] = [{"name": f, "resources": r} for f, r in by_flavor.items()]
                    status["flavorsReservation"] = copy.deepcopy(status["flavorsUsage"])
                if status == (obj.get("status") or {}):
                    continue
                try:
                    self.server.store.update(
                        resource,
                        namespace or None,
                        name,
                        lambda cur, s=status: {**cur, "status": s},
                        subresource="status",
                    )
                except ApiError as exc:
                    if exc.code != 404:
                        raise


def _split(candidate_key: str) -> WorkloadKey:
    namespace, name = candidate_key.split("/", 1)
    return namespace, name
