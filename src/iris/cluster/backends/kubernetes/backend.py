"""The Kubernetes backend: one Pod per attempt, placed by Kueue and kube-scheduler.

Each control round the controller hands :meth:`KubernetesBackend.reconcile` the complete
desired set of attempts. The backend lists this backend's pods (by label, paginated),
plans with the pure :func:`plan_reconcile`, performs the creates and deletes concurrently,
and answers one observation per desired attempt. Nothing depends on having seen a watch
event: every round re-reads the truth from the API server.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from iris.cluster.backends.kubernetes.api import ExecResult, KubeApi, KubeApiError
from iris.cluster.backends.kubernetes.config import KubernetesBackendConfig
from iris.cluster.backends.kubernetes.kueue import (
    KUEUE_STOPPED_EVENT,
    kueue_preemptions,
    kueue_reasons_by_pod,
    summarize_workloads,
    workload_missing_queue,
)
from iris.cluster.backends.kubernetes.logs import parse_log_line
from iris.cluster.backends.kubernetes.naming import (
    LABEL_BACKEND_ID,
    LABEL_MANAGED,
    TASK_CONTAINER,
    is_pod_of_attempt,
    label_value,
    pod_name,
)
from iris.cluster.backends.kubernetes.overview import (
    describe_pod,
    summarize_event,
    summarize_node,
    summarize_pods,
)
from iris.cluster.backends.kubernetes.plan import (
    PodCreate,
    PodDelete,
    plan_reconcile,
    pod_attempt_uid,
    to_observation,
)
from iris.cluster.backends.kubernetes.pods import PodSpecError, attempt_secret, build_pod
from iris.cluster.backends.kubernetes.status import is_kueue_gated, is_terminal_pod, map_pod_status
from iris.cluster.runtime.profiling import pod_profile_argv
from iris.cluster.types import AttemptRef, DesiredGroup, GroupReport, TaskTarget
from iris.rpc.enums import TaskState
from iris.rpc.errors import InvalidArgument, NotFound, Unavailable
from iris.rpc.models import (
    AttemptObservation,
    DesiredAttempt,
    ExecRequest,
    ExecResponse,
    LogLine,
    LogsResponse,
)

logger = logging.getLogger(__name__)
_T = TypeVar("_T")
_R = TypeVar("_R")

# How often Kueue Workloads are re-read to explain gated pods (reads, never on the write path).
KUEUE_REFRESH_S = 2.0
KUEUE_RETRY_AFTER_FAILURE_S = 60.0
FOLLOW_POLL_S = 0.5
# The API server ends each watch request after this long; the watcher then notices close().
WATCH_SERVER_TIMEOUT_S = 5


class KubernetesBackend:
    """Pods + Kueue behind the same reconcile contract as a worker daemon."""

    def __init__(
        self,
        config: KubernetesBackendConfig,
        *,
        controller_url: str,
        backend_id: str,
        api_factory: Callable[[KubernetesBackendConfig], KubeApi] = KubeApi,
    ) -> None:
        """``api_factory`` makes the API connections (one for calls, one for the watch); unit
        tests pass an in-memory fake of :class:`KubeApi` here."""
        self.config = config
        self.controller_url = controller_url
        self.backend_id = backend_id
        self._api_factory = api_factory
        self._api = api_factory(config)
        self._selector = {LABEL_MANAGED: "true", LABEL_BACKEND_ID: label_value(backend_id)}
        self._pool = ThreadPoolExecutor(
            max_workers=config.max_concurrent_requests, thread_name_prefix="iris-k8s"
        )
        self._kueue_lock = threading.Lock()
        self._kueue_workloads: list[dict[str, Any]] = []
        self._kueue_read_at = float("-inf")
        self._kueue_next_try = 0.0
        self._closing = threading.Event()
        self._watcher: threading.Thread | None = None
        self._watch_api: KubeApi | None = None

    # ------------------------------------------------------------ the controller's TaskBackend protocol

    def converge(self, groups: Sequence[DesiredGroup]) -> list[GroupReport]:
        """The whole cluster is one group: every desired attempt, one report."""
        try:
            observations = self.reconcile([a for g in groups for a in g.attempts])
        except Unavailable as exc:
            return [GroupReport(None, None, error=exc.message)]
        return [GroupReport(None, tuple(observations))]

    def attempt_logs(self, ref: AttemptRef, *, offset: int, limit: int) -> LogsResponse:
        return self.read_logs(ref.target, ref.task_id, offset=offset, limit=limit)

    def attempt_exec(self, ref: AttemptRef, request: ExecRequest) -> ExecResponse:
        argv = request.argv
        if request.profile is not None:  # the image's profiler against the container's PID 1
            p = request.profile
            argv = pod_profile_argv(p.kind, p.duration_s, p.format)
        result = self.exec(ref.target, ref.task_id, argv, timeout_s=request.timeout_s)
        return ExecResponse(exit_code=result.exit_code, stdout=result.stdout, stderr=result.stderr)

    def attempt_status(self, ref: AttemptRef) -> dict[str, Any]:
        return {"kind": "pod", **self.process_status(ref.target, ref.task_id)}

    def overview(self) -> dict[str, Any]:
        return self.cluster_overview()

    def watch(self, on_change: Callable[[], None]) -> None:
        self.watch_changes(on_change)

    def set_controller_url(self, url: str) -> None:
        self.controller_url = url

    # ------------------------------------------------------------ reconcile

    def reconcile(self, desired: Sequence[DesiredAttempt]) -> list[AttemptObservation]:
        """Converge our pods on ``desired``; one observation per desired attempt.

        Raises :class:`iris.rpc.errors.Unavailable` when the pods cannot be listed; the
        controller should then leave every attempt as it is and try again next round.
        """
        try:
            pods = self._api.list_pods(self._selector)
        except KubeApiError as err:
            raise Unavailable(f"cannot list pods in namespace {self.config.namespace}: {err}") from err
        now = time.time()
        desired_uids = {d.attempt_uid for d in desired}
        gated = [p for p in pods if is_kueue_gated(p) and pod_attempt_uid(p) in desired_uids]
        workloads = self._workloads(now) if gated else []
        reasons = kueue_reasons_by_pod(workloads, gated)
        refusals = kueue_reasons_by_pod(workloads, gated, workload_missing_queue)
        plan = plan_reconcile(
            desired,
            pods,
            now=now,
            terminal_pod_retention_s=self.config.terminal_pod_retention_s,
            image_pull_grace_s=self.config.image_pull_grace_s,
            kueue_reasons=reasons,
            kueue_refusals=refusals,
        )
        created = dict(self._run_all(self._create, plan.creates))
        self._run_all(self._delete, plan.deletes)
        observations = {**plan.observations, **created}
        self._explain_vanished(observations)
        return [observations[uid] for uid in plan.order]

    def _explain_vanished(self, observations: dict[str, AttemptObservation]) -> None:
        """A pod Kueue preempted can be gone before we look (Kueue lets a plain pod go as soon as
        it is deleted): its "Stopped" event still says why, so the attempt is PREEMPTED, not lost."""
        missing = [uid for uid, o in observations.items() if o.state is TaskState.MISSING]
        if not missing:
            return
        try:
            preempted = kueue_preemptions(self._api.list_events_with_reason(KUEUE_STOPPED_EVENT))
        except KubeApiError as err:
            logger.info("cannot read Kueue's events (a preempted pod may be reported lost): %s", err)
            return
        for uid in missing:
            message = next((m for name, m in preempted.items() if is_pod_of_attempt(name, uid)), None)
            if message is not None:
                why = f"preempted by Kueue: {message}"
                observations[uid] = _observation(uid, TaskState.PREEMPTED, why, error=why, released=True)

    def _run_all(self, fn: Callable[[_T], _R], items: Sequence[_T]) -> list[_R]:
        """Apply ``fn`` to every item, concurrently over the connection pool when there are several."""
        if len(items) <= 1:
            return [fn(item) for item in items]
        return list(self._pool.map(fn, items))

    def _create(self, item: PodCreate) -> tuple[str, AttemptObservation]:
        uid = item.attempt_uid
        try:
            secret = attempt_secret(item.spec, self.config, self.controller_url)
            secret_name = secret["metadata"]["name"] if secret is not None else None
            manifest = build_pod(
                item.spec,
                self.config,
                controller_url=self.controller_url,
                backend_id=self.backend_id,
                bundle_token=item.spec.env.get("IRIS_TOKEN"),  # the job's own token fetches its bundle
                secret_name=secret_name,
            )
        except PodSpecError as err:
            message = f"cannot run on Kubernetes: {err}"
            return uid, _observation(uid, TaskState.FAILED, message, error=message, released=True)
        name = manifest["metadata"]["name"]
        if secret is not None and secret_name is not None:
            # The job token lives in a Secret of this attempt, not in the pod spec; it goes with the pod.
            try:
                self._api.put_secret(secret)
            except KubeApiError as err:
                logger.warning("creating secret %s failed (will retry): %s", secret_name, err)
                return uid, _observation(
                    uid, TaskState.ASSIGNED, f"could not create the secret of pod {name} (will retry): {err}"
                )
        try:
            pod: dict[str, Any] | None = self._api.create_pod(manifest)
        except KubeApiError as err:
            if err.status == 409:  # created by an earlier round whose answer we never saw
                pod = self._get_quietly(name)
            elif err.status in (400, 422) or _denied_by_webhook(err):
                message = _refusal(name, err)
                if secret_name is not None:
                    self._forget_secret(secret_name)
                return uid, _observation(uid, TaskState.FAILED, message, error=message, released=True)
            else:
                logger.warning("creating pod %s failed (will retry): %s", name, err)
                return uid, _observation(
                    uid, TaskState.ASSIGNED, f"could not create pod {name} (will retry): {err}"
                )
        if pod is None:
            return uid, _observation(uid, TaskState.ASSIGNED, f"pod {name} is being created")
        if secret_name is not None:
            try:
                self._api.own_secret(secret_name, pod)
            except KubeApiError as err:  # the pod runs; its secret outlives it (labelled by attempt)
                logger.warning("making pod %s own secret %s failed: %s", name, secret_name, err)
        obs = map_pod_status(pod, now=time.time(), image_pull_grace_s=self.config.image_pull_grace_s)
        return uid, to_observation(uid, obs)

    def _delete(self, item: PodDelete) -> None:
        try:
            self._api.delete_pod(item.name)
        except KubeApiError as err:
            # The pod is still listed next round, and deleted then.
            logger.warning("deleting %s pod %s failed (will retry): %s", item.why, item.name, err)

    def _forget_secret(self, name: str) -> None:
        try:
            self._api.delete_secret(name)
        except KubeApiError as err:
            logger.warning("deleting secret %s failed: %s", name, err)

    def _get_quietly(self, name: str) -> dict[str, Any] | None:
        try:
            return self._api.get_pod(name)
        except KubeApiError:
            return None

    def _workloads(self, now: float) -> list[dict[str, Any]]:
        """Kueue Workloads, re-read at most every KUEUE_REFRESH_S; empty where unreadable."""
        with self._kueue_lock:
            if now - self._kueue_read_at < KUEUE_REFRESH_S or now < self._kueue_next_try:
                return self._kueue_workloads
            try:
                self._kueue_workloads = self._api.list_workloads()
                self._kueue_read_at = now
            except KubeApiError as err:
                logger.info("cannot read Kueue workloads (pending reasons will be shorter): %s", err)
                self._kueue_workloads = []
                self._kueue_next_try = now + KUEUE_RETRY_AFTER_FAILURE_S
            return self._kueue_workloads

    def watch_changes(self, on_change: Callable[[], None]) -> None:
        """Call ``on_change`` (from a background thread) whenever one of our pods changes, so
        the controller can reconcile at once instead of at its next tick.

        Purely a latency hint: reconcile re-lists every round and never relies on an event.
        """
        if self._watcher is not None:
            raise RuntimeError("watch_changes was already started")
        self._watch_api = self._api_factory(self.config)
        self._watcher = threading.Thread(
            target=self._watch_loop, args=(self._watch_api, on_change), name="iris-k8s-watch", daemon=True
        )
        self._watcher.start()

    def _watch_loop(self, api: KubeApi, on_change: Callable[[], None]) -> None:
        resource_version: str | None = None
        failures = 0
        while not self._closing.is_set():
            try:
                events = api.watch_pods(
                    self._selector,
                    should_stop=self._closing.is_set,
                    server_timeout_s=WATCH_SERVER_TIMEOUT_S,
                    resource_version=resource_version,
                )
                for kind, pod in events:
                    failures = 0
                    resource_version = (pod.get("metadata") or {}).get("resourceVersion") or resource_version
                    if kind != "BOOKMARK":
                        on_change()
            except Exception as exc:  # the hint must outlive any API hiccup
                if self._closing.is_set():
                    return
                failures += 1
                # A stale pooled connection fails once and is replaced: only repeated failures matter.
                log = logger.warning if failures >= 3 else logger.debug
                log("pod watch interrupted (%d in a row), resuming: %s", failures, exc)
                self._closing.wait(min(5.0, 0.1 * 2**failures) if failures > 1 else 0.0)

    # ------------------------------------------------------------ task RPCs

    def pod_name_for(self, target: TaskTarget, task_id: str) -> str:
        if target.attempt_uid is None:
            raise InvalidArgument("a Kubernetes task target names an attempt_uid, not an address")
        return pod_name(task_id, target.attempt_uid)

    def read_logs(
        self, target: TaskTarget, task_id: str, *, offset: int = 0, limit: int = 1000
    ) -> LogsResponse:
        """Lines ``[offset, offset + limit)`` of the task container's log."""
        name = self.pod_name_for(target, task_id)
        pod = self._get(name)
        if pod is None:
            lines = [] if offset else [_gone_line(name)]
            return LogsResponse(lines=lines, next_offset=offset + len(lines), complete=True)
        try:
            raw = self._api.pod_log(name, TASK_CONTAINER)
        except KubeApiError as err:
            if err.status in (400, 404):  # container not started yet (or pod just vanished)
                return LogsResponse(lines=[], next_offset=offset, complete=False)
            raise Unavailable(f"cannot read logs of pod {name}: {err}") from err
        window = raw[offset : offset + limit]
        lines = [parse_log_line(text) for text in window]
        next_offset = offset + len(lines)
        return LogsResponse(
            lines=lines, next_offset=next_offset, complete=is_terminal_pod(pod) and next_offset >= len(raw)
        )

    def follow_logs(self, target: TaskTarget, task_id: str) -> Iterator[LogLine]:
        """Every log line from the start, then new ones as they come, until the pod ends."""
        name = self.pod_name_for(target, task_id)
        seen = 0
        while True:
            pod = self._get(name)
            if pod is None:
                return
            try:
                position = 0
                for text in self._api.follow_pod_log(name, TASK_CONTAINER):
                    position += 1
                    if position > seen:  # after a reconnect, skip what was already sent
                        seen = position
                        yield parse_log_line(text, fallback_ts=time.time())
            except KubeApiError as err:
                if err.status not in (0, 400, 404):
                    raise Unavailable(f"cannot follow logs of pod {name}: {err}") from err
            pod = self._get(name)
            if pod is None or is_terminal_pod(pod):
                if pod is not None:
                    yield from self._tail_after(name, seen)
                return
            time.sleep(FOLLOW_POLL_S)

    def _tail_after(self, name: str, seen: int) -> Iterator[LogLine]:
        """Lines written between the end of the stream and the pod turning terminal."""
        try:
            raw = self._api.pod_log(name, TASK_CONTAINER)
        except KubeApiError:
            return
        for text in raw[seen:]:
            yield parse_log_line(text)

    def exec(
        self, target: TaskTarget, task_id: str, argv: list[str], *, timeout_s: float = 60.0
    ) -> ExecResult:
        """Run ``argv`` in the task container (pods/exec over a websocket)."""
        if not argv:
            raise InvalidArgument("exec needs a command")
        name = self.pod_name_for(target, task_id)
        try:
            return self._api.exec(name, TASK_CONTAINER, argv, timeout_s)
        except KubeApiError as err:
            if self._get_quietly(name) is None:
                raise NotFound(f"pod {name} does not exist") from err
            raise Unavailable(f"exec in pod {name} failed: {err}") from err

    def process_status(self, target: TaskTarget, task_id: str) -> dict[str, Any]:
        """Phase, conditions, container statuses, the mapped state and recent events."""
        name = self.pod_name_for(target, task_id)
        pod = self._get(name)
        if pod is None:
            raise NotFound(f"pod {name} does not exist (never created, or deleted after it finished)")
        summary = describe_pod(pod)
        reasons = kueue_reasons_by_pod(self._workloads(time.time()), [pod]) if is_kueue_gated(pod) else {}
        obs = map_pod_status(
            pod,
            now=time.time(),
            image_pull_grace_s=self.config.image_pull_grace_s,
            kueue_reason=reasons.get(name),
        )
        summary["state"] = obs.state.value
        summary["state_message"] = obs.message
        try:
            summary["events"] = [summarize_event(e) for e in self._api.list_pod_events(name)]
        except KubeApiError as err:
            summary["events_error"] = str(err)
        return summary

    def cluster_overview(self) -> dict[str, Any]:
        """Our pods by phase, Kueue admission state, and nodes when the role may list them."""
        overview: dict[str, Any] = {
            "backend_id": self.backend_id,
            "namespace": self.config.namespace,
            "local_queue": self.config.local_queue,
            "server": self._api.server,
        }
        try:
            overview["pods"] = summarize_pods(self._api.list_pods(self._selector))
        except KubeApiError as err:
            overview["pods_error"] = str(err)
        try:
            workloads = summarize_workloads(self._api.list_workloads())
            overview["workloads"] = workloads
            overview["workloads_admitted"] = sum(1 for w in workloads if w["admitted"])
            overview["workloads_pending"] = sum(1 for w in workloads if not w["admitted"])
        except KubeApiError as err:
            overview["workloads_error"] = str(err)
        try:
            overview["nodes"] = [summarize_node(n) for n in self._api.list_nodes()]
        except KubeApiError as err:
            overview["nodes_error"] = str(err)
        return overview

    def close(self) -> None:
        self._closing.set()
        self._pool.shutdown(wait=True, cancel_futures=True)
        self._api.close()
        if self._watch_api is not None:
            # A blocked watch read ends by itself within WATCH_SERVER_TIMEOUT_S (daemon thread).
            self._watch_api.close()

    def _get(self, name: str) -> dict[str, Any] | None:
        try:
            return self._api.get_pod(name)
        except KubeApiError as err:
            raise Unavailable(f"cannot read pod {name}: {err}") from err


def _observation(
    uid: str, state: TaskState, message: str, *, error: str | None = None, released: bool = False
) -> AttemptObservation:
    return AttemptObservation(
        attempt_uid=uid, state=state, message=message, error=error, runtime_released=released
    )


def _denied_by_webhook(err: KubeApiError) -> bool:
    """An admission webhook (Kueue's among them) said no: the same pod will be refused again.

    Other 403s (RBAC not bound yet, a PriorityClass not installed yet, a namespace quota that
    is full right now) can pass once the operator or the cluster catches up, so they are retried.
    """
    return err.status == 403 and "admission webhook" in err.message


def _refusal(name: str, err: KubeApiError) -> str:
    """One sentence for an API server's permanent no."""
    if err.status == 403:
        return f"Kubernetes refused pod {name}: {err.message}"
    return f"Kubernetes rejected pod {name} as invalid: {err.message}"


def _gone_line(name: str) -> LogLine:
    return LogLine(
        ts=time.time(),
        stream="system",
        line=f"pod {name} no longer exists; Kubernetes keeps a pod's logs only while the pod exists",
    )
