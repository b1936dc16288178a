"""The autoscaler's imperative shell: observe the platform, call the planner, apply its plan, persist.

The controller calls ``tick(demand, slice_usage)`` every evaluation interval (and after a
scheduling pass that left tasks unplaced), ``reap_slice`` / ``reap_worker`` when its health
tracker gives up on a worker, and ``status()`` / ``actions()`` for the API and dashboard. All
methods are thread-safe.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, fields, is_dataclass, replace
from enum import StrEnum
from typing import cast

from pydantic import BaseModel

from iris.cluster.config import AutoscalerDefaults, ClusterConfig, ScaleGroupConfig
from iris.cluster.controller.autoscaler.model import (
    ActionKind,
    AutoscalerPlan,
    AutoscalerSnapshot,
    DemandEntry,
    GroupDecision,
    GroupSnapshot,
    ScaleAction,
    SliceView,
)
from iris.cluster.controller.autoscaler.planner import plan
from iris.cluster.controller.autoscaler.routing import unfittable_reason
from iris.cluster.controller.autoscaler.store import AutoscalerStore, GroupRecord, SliceRecord
from iris.cluster.platforms.base import Platform, SliceInfo, SliceState
from iris.rpc.models import Constraint, ResourceSpec

logger = logging.getLogger(__name__)

_CREATE_FAILED_PREFIX = "create failed: "


@dataclass(frozen=True)
class SliceStatus:
    slice_id: str
    group: str
    state: SliceState
    created_at: float
    ready_at: float | None
    idle_since: float | None
    worker_ids: tuple[str, ...]
    addresses: tuple[str, ...]
    error: str | None
    running_tasks: int


@dataclass(frozen=True)
class GroupStatus:
    """One scale group for the dashboard and ``iris cluster status``."""

    name: str
    priority: int
    min_slices: int
    max_slices: int
    buffer_slices: int
    num_vms: int
    resources: ResourceSpec
    attributes: Mapping[str, str]
    slices: tuple[SliceStatus, ...]
    slices_by_state: Mapping[str, int]
    target: int
    demand_tasks: int
    demand_slices: int
    status: str
    in_backoff: bool
    backoff_until: float | None
    backoff_reason: str
    last_action: ScaleAction | None
    waiting_tasks: int = 0  # pending tasks for this group, placed or not (see GroupDecision)


class Autoscaler:
    def __init__(
        self,
        groups: Iterable[ScaleGroupConfig] | Mapping[str, ScaleGroupConfig],
        platform: Platform,
        store: AutoscalerStore,
        clock: Callable[[], float] = time.time,
        *,
        controller_url: str = "",
        timings: AutoscalerDefaults | None = None,
    ) -> None:
        if isinstance(groups, Mapping):
            # The by-name form; pyright cannot rule out a mapping keyed by configs (never passed).
            by_name = cast("Mapping[str, ScaleGroupConfig]", groups)
            configs = list(by_name.values())
        else:
            configs = list(groups)
        self._groups = {g.name: g for g in configs}
        self.platform = platform
        self.store = store
        self.clock = clock
        self.controller_url = controller_url
        """Where new workers register; settable until the first slice is created."""
        self.timings = timings or AutoscalerDefaults()
        self._lock = threading.RLock()
        self._slices = {s.slice_id: s for s in store.load_slices()}
        saved = store.load_groups()
        self._group_state = {name: saved.get(name, GroupRecord()) for name in self._groups}
        self._removed: set[str] = set()
        self._pending_actions: list[ScaleAction] = []
        self._usage: dict[str, int] = {}
        self.released_workers: list[str] = []
        """Workers of the quarantined slices the last tick terminated."""
        self._last_plan: AutoscalerPlan | None = None
        self._last_action: dict[str, ScaleAction] = {a.group: a for a in store.recent_actions(1000)}
        self._adopted = False

    @classmethod
    def from_config(
        cls,
        config: ClusterConfig,
        platform: Platform,
        store: AutoscalerStore,
        *,
        controller_url: str = "",
        clock: Callable[[], float] = time.time,
    ) -> Autoscaler:
        """The autoscaler a cluster config describes (its scale groups and ``defaults.autoscaler``)."""
        return cls(
            config.scale_groups.values(),
            platform,
            store,
            clock,
            controller_url=controller_url,
            timings=config.defaults.autoscaler,
        )

    # ------------------------------------------------------------ public API

    @property
    def groups(self) -> list[ScaleGroupConfig]:
        """Configured groups in routing order."""
        return sorted(self._groups.values(), key=lambda g: (g.priority, g.name))

    @property
    def group_names(self) -> frozenset[str]:
        """For ``BackendDescriptor.scale_groups``."""
        return frozenset(self._groups)

    def adopt(self) -> list[str]:
        """Reconcile tracked slices with what the platform has after a (re)start; returns kept slice ids.

        A slice the platform still lists (its workers still alive) is kept rather than recreated;
        its idle clock restarts, so a restart never scales anything down early.
        """
        with self._lock:
            now = self.clock()
            infos = self._list_platform()
            kept: list[str] = []
            for info in infos.values():
                if info.scale_group not in self._groups:
                    continue  # _refresh terminates it
                kept.append(info.slice_id)
                detail = f"kept after restart: {info.state.value}, {len(info.worker_ids)} worker(s)"
                self._log(now, info.scale_group, ActionKind.ADOPTED, info.slice_id, detail)
            self._refresh(now, infos)
            for record in self._slices.values():
                record.idle_since = None
            self._bump_sequences()
            self._adopted = True
            self._persist({})
            return kept

    def tick(
        self,
        demand: Sequence[DemandEntry] = (),
        slice_usage: Mapping[str, int] | Collection[str] = (),
        quarantined: Collection[str] = (),
    ) -> AutoscalerPlan:
        """One evaluation. ``slice_usage``: running task count per slice id (or the ids of busy slices).

        Count every active attempt (ASSIGNED, BUILDING, RUNNING) on a slice's workers, so a slice
        that was just given work is never scaled down. ``quarantined``: slices with a worker the
        controller quarantined; the planner does not count them (so the group's minimum and its
        demand bring up replacements) and each is terminated once its tasks are gone (its workers
        are then in ``released_workers``).
        """
        with self._lock:
            if not self._adopted:
                self.adopt()
            now = self.clock()
            self._usage = _usage_map(slice_usage)
            self._retry_terminations(now)
            self._refresh(now, self._list_platform())
            self.released_workers = self._release_quarantined(set(quarantined), now)
            self._update_idle(now)
            snapshot = self._snapshot(tuple(demand), frozenset(quarantined))
            result = plan(snapshot, now)
            for action in result.actions:
                self._record(action)
            for terminate in result.terminates:
                self._terminate(terminate.slice_id, now)
            for create in result.creates:
                self._create(create.group, create.slice_id, now)
            for decision in result.groups:
                self._group_state[decision.group] = GroupRecord(
                    decision.next_seq, decision.backoff, decision.recent_creates
                )
            self._last_plan = result
            self._persist({d.group: self._group_state[d.group] for d in result.groups})
            return result

    def reap_slice(self, slice_id: str, reason: str) -> list[str]:
        """Terminate a slice whose worker the health tracker declared dead; returns its worker ids
        (the siblings should be failed too: a slice lives and dies as a unit)."""
        with self._lock:
            record = self._slices.get(slice_id)
            if record is None:
                return []
            now = self.clock()
            self._log(now, record.group, ActionKind.REAPED, slice_id, reason)
            self._terminate(slice_id, now)
            self._persist({})
            return list(record.worker_ids)

    def reap_worker(self, worker_id: str, reason: str = "worker stopped answering") -> list[str]:
        """``reap_slice`` for the slice holding ``worker_id``; [] if no tracked slice has it."""
        with self._lock:
            for record in self._slices.values():
                if worker_id in record.worker_ids:
                    return self.reap_slice(record.slice_id, f"worker {worker_id}: {reason}")
            return []

    def terminate_all(self, reason: str) -> list[str]:
        """Remove every slice (e.g. ``iris cluster stop`` of a local cluster); returns their worker ids."""
        with self._lock:
            now = self.clock()
            workers: list[str] = []
            for record in list(self._slices.values()):
                self._log(now, record.group, ActionKind.SCALE_DOWN, record.slice_id, reason)
                workers += record.worker_ids
                self._terminate(record.slice_id, now)
            self._persist({})
            return workers

    def unfittable_reason(
        self,
        resources: ResourceSpec,
        constraints: Sequence[Constraint] = (),
        gang_size: int = 1,
        group_by: str | None = None,
    ) -> str | None:
        """Why no configured group could ever run such a job (None: some group could)."""
        return unfittable_reason(resources, constraints, self._groups.values(), gang_size, group_by)

    def status(self) -> list[GroupStatus]:
        with self._lock:
            now = self.clock()
            decisions = {d.group: d for d in self._last_plan.groups} if self._last_plan else {}
            return [
                self._group_status(g, decisions.get(g.name), self._last_action.get(g.name), now)
                for g in self.groups
            ]

    def status_view(self, action_limit: int = 100) -> dict[str, object]:
        """Everything the dashboard's autoscaler tab shows, as plain JSON-ready data:
        ``{"groups": [GroupStatus...], "actions": [ScaleAction...], "pending_hints": {job_id: line}}``."""
        with self._lock:
            return {
                "groups": [_jsonable(g) for g in self.status()],
                "actions": [_jsonable(a) for a in self.actions(action_limit)],
                "pending_hints": dict(self.pending_hints()),
            }

    def actions(self, limit: int = 100) -> list[ScaleAction]:
        """The newest ``limit`` decisions, oldest first."""
        with self._lock:
            return self.store.recent_actions(limit)

    def pending_hints(self) -> Mapping[str, str]:
        """Per job id, what the autoscaler is doing about its pending tasks (from the last tick)."""
        with self._lock:
            return dict(self._last_plan.hints) if self._last_plan else {}

    def slices(self) -> list[SliceStatus]:
        with self._lock:
            return [self._slice_status(r) for r in sorted(self._slices.values(), key=lambda r: r.slice_id)]

    # ------------------------------------------------------------ observing

    def _list_platform(self) -> dict[str, SliceInfo]:
        return {info.slice_id: info for info in self.platform.list_slices()}

    def _refresh(self, now: float, infos: dict[str, SliceInfo]) -> None:
        for slice_id, record in list(self._slices.items()):
            info = infos.get(slice_id)
            if info is not None:
                self._observe(record, info, now)
            elif record.terminating:
                self._forget(slice_id)
            elif not (record.error or "").startswith(_CREATE_FAILED_PREFIX):
                self._log(
                    now, record.group, ActionKind.SLICE_LOST, slice_id, "the platform no longer lists it"
                )
                self._forget(slice_id)
        for slice_id, info in infos.items():
            if slice_id not in self._slices:
                record = SliceRecord(slice_id, info.scale_group, info.state, info.created_at)
                self._slices[slice_id] = record
                self._removed.discard(slice_id)
                self._observe(record, info, now)
        for record in [r for r in self._slices.values() if r.group not in self._groups and not r.terminating]:
            reason = f"scale group {record.group!r} is no longer configured"
            self._log(now, record.group, ActionKind.UNKNOWN_GROUP, record.slice_id, reason)
            self._terminate(record.slice_id, now)

    def _observe(self, record: SliceRecord, info: SliceInfo, now: float) -> None:
        record.state = info.state
        record.worker_ids = info.worker_ids or record.worker_ids
        record.addresses = info.addresses
        record.error = info.error
        if info.state is SliceState.READY and record.ready_at is None:
            record.ready_at = now
            took = now - record.created_at
            self._log(now, record.group, ActionKind.SLICE_READY, record.slice_id, f"ready after {took:.1f}s")

    def _update_idle(self, now: float) -> None:
        for record in self._slices.values():
            if record.state is not SliceState.READY or self._usage.get(record.slice_id, 0) > 0:
                record.idle_since = None
            elif record.idle_since is None:
                record.idle_since = now

    def _release_quarantined(self, quarantined: set[str], now: float) -> list[str]:
        """Terminate the quarantined slices that run nothing any more; their worker ids."""
        released: list[str] = []
        for record in list(self._slices.values()):
            if record.slice_id not in quarantined or record.terminating:
                continue
            if self._usage.get(record.slice_id, 0) > 0:
                continue
            reason = "quarantined (its workers' attempts kept failing); its tasks are gone"
            self._log(now, record.group, ActionKind.REAPED, record.slice_id, reason)
            released += record.worker_ids
            self._terminate(record.slice_id, now)
        return released

    def _snapshot(
        self, demand: tuple[DemandEntry, ...], quarantined: frozenset[str] = frozenset()
    ) -> AutoscalerSnapshot:
        by_group: dict[str, list[SliceView]] = {name: [] for name in self._groups}
        for r in self._slices.values():
            if r.group in by_group and not r.terminating and r.slice_id not in quarantined:
                by_group[r.group].append(
                    SliceView(
                        r.slice_id, r.state, r.created_at, r.ready_at, r.idle_since, r.worker_ids, r.error
                    )
                )
        groups = tuple(
            GroupSnapshot(
                config=config,
                slices=tuple(by_group[name]),
                backoff=self._group_state[name].backoff,
                next_seq=self._group_state[name].next_seq,
                recent_creates=self._group_state[name].recent_creates,
            )
            for name, config in self._groups.items()
        )
        return AutoscalerSnapshot(groups=groups, demand=demand, timings=self.timings)

    # ------------------------------------------------------------ acting

    def _create(self, group: str, slice_id: str, now: float) -> None:
        try:
            handle = self.platform.create_slice(self._groups[group], slice_id, self.controller_url)
        except Exception as exc:  # any platform failure is a failed boot, never a crashed controller
            logger.warning("creating slice %s failed: %s", slice_id, exc)
            error = f"{_CREATE_FAILED_PREFIX}{exc}"
            self._log(now, group, ActionKind.CREATE_FAILED, slice_id, error)
            self._slices[slice_id] = SliceRecord(slice_id, group, SliceState.FAILED, now, error=error)
            return
        self._slices[slice_id] = SliceRecord(
            slice_id, group, SliceState.CREATING, handle.created_at, worker_ids=handle.worker_ids
        )
        self._removed.discard(slice_id)

    def _terminate(self, slice_id: str, now: float) -> None:
        record = self._slices.get(slice_id)
        try:
            self.platform.terminate(slice_id)
        except Exception as exc:
            logger.warning("terminating slice %s failed: %s", slice_id, exc)
            if record is not None:
                if not record.terminating:
                    self._log(now, record.group, ActionKind.TERMINATE_FAILED, slice_id, f"{exc} (will retry)")
                record.terminating = True
            return
        self._forget(slice_id)

    def _retry_terminations(self, now: float) -> None:
        for record in [r for r in self._slices.values() if r.terminating]:
            self._terminate(record.slice_id, now)

    def _forget(self, slice_id: str) -> None:
        if self._slices.pop(slice_id, None) is not None:
            self._removed.add(slice_id)

    def _log(self, now: float, group: str, kind: ActionKind, slice_id: str | None, reason: str) -> None:
        self._record(ScaleAction(now, group, kind, slice_id, reason))

    def _record(self, action: ScaleAction) -> None:
        self._pending_actions.append(action)
        self._last_action[action.group] = action

    def _persist(self, groups: dict[str, GroupRecord]) -> None:
        for action in self._pending_actions:
            logger.info(
                "autoscaler %s %s %s: %s",
                action.group,
                action.action.value,
                action.slice_id or "",
                action.reason,
            )
        self.store.save(self._slices.values(), self._removed, groups, self._pending_actions)
        self._removed.clear()
        self._pending_actions = []

    def _bump_sequences(self) -> None:
        """Never reuse the id of a slice that exists (the database may be older than the platform)."""
        for record in self._slices.values():
            state = self._group_state.get(record.group)
            match = re.fullmatch(re.escape(record.group) + r"-(\d+)", record.slice_id)
            if state is not None and match and int(match.group(1)) >= state.next_seq:
                self._group_state[record.group] = replace(state, next_seq=int(match.group(1)) + 1)
        self.store.save((), (), dict(self._group_state), ())

    # ------------------------------------------------------------ views

    def _slice_status(self, r: SliceRecord) -> SliceStatus:
        return SliceStatus(
            r.slice_id,
            r.group,
            r.state,
            r.created_at,
            r.ready_at,
            r.idle_since,
            r.worker_ids,
            r.addresses,
            r.error,
            self._usage.get(r.slice_id, 0),
        )

    def _group_status(
        self, config: ScaleGroupConfig, decision: GroupDecision | None, last: ScaleAction | None, now: float
    ) -> GroupStatus:
        slices = tuple(self._slice_status(r) for r in self._slices.values() if r.group == config.name)
        by_state: dict[str, int] = {state.value: 0 for state in SliceState}
        for s in slices:
            by_state[s.state.value] += 1
        backoff = decision.backoff if decision else self._group_state[config.name].backoff
        return GroupStatus(
            name=config.name,
            priority=config.priority,
            min_slices=config.min_slices,
            max_slices=config.max_slices,
            buffer_slices=config.buffer_slices,
            num_vms=config.num_vms,
            resources=config.resources,
            attributes=config.worker_attributes(),
            slices=slices,
            slices_by_state=by_state,
            target=decision.target if decision else 0,
            demand_tasks=decision.demand_tasks if decision else 0,
            demand_slices=decision.demand_slices if decision else 0,
            waiting_tasks=decision.waiting_tasks if decision else 0,
            status=decision.status if decision else "not evaluated yet",
            in_backoff=backoff.active(now),
            backoff_until=backoff.until if backoff.active(now) else None,
            backoff_reason=backoff.reason if backoff.active(now) else "",
            last_action=last,
        )


def _jsonable(value: object) -> object:
    if is_dataclass(value) and not isinstance(value, type):
        return {f.name: _jsonable(getattr(value, f.name)) for f in fields(value)}
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    if isinstance(value, StrEnum):
        return value.value
    if isinstance(value, Mapping):
        mapping = cast("Mapping[object, object]", value)  # any mapping: its keys become strings
        return {str(k): _jsonable(v) for k, v in mapping.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in cast("Sequence[object]", value)]
    return value


def _usage_map(usage: Mapping[str, int] | Collection[str]) -> dict[str, int]:
    if isinstance(usage, Mapping):
        counts = cast("Mapping[str, int]", usage)  # the counted form, not a Collection[str] that is a Mapping
        return {str(k): int(v) for k, v in counts.items()}
    return {str(k): 1 for k in usage}
