"""The autoscaler's decisions as a pure function: ``plan(snapshot, now) -> AutoscalerPlan``.

Per evaluation:

1. Health: FAILED slices are terminated (a boot failure if they were never READY); slices not READY
   within the boot timeout are terminated as boot failures. ``failure_threshold`` boot failures
   within the window put the group in backoff (exponential, capped, reset once a slice of the
   group becomes ready).
2. Routing (waterfall): each demand entry goes to the fitting groups in priority order, first into
   slices that already exist (idle or booting), then into new slices. Groups in backoff take no
   demand and groups at ``max_slices`` take no more, so demand falls through to the next group.
3. Per group: ``target = clamp(busy + demand_slices + buffer_slices, min_slices, max_slices)``.
   Below target: create slices (rate limited, never in backoff). Above it: terminate READY slices
   idle longer than the scale-down delay, longest idle first, never below target and never one
   running tasks.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from iris.cluster.config import AutoscalerDefaults
from iris.cluster.controller.autoscaler.model import (
    ActionKind,
    AutoscalerPlan,
    AutoscalerSnapshot,
    BackoffState,
    CreateSlice,
    DemandEntry,
    GroupDecision,
    GroupSnapshot,
    ScaleAction,
    SliceView,
    TerminateSlice,
    UnmetDemand,
)
from iris.cluster.controller.autoscaler.routing import SlicePacker, group_misfit
from iris.cluster.platforms.base import SliceState

_RATE_WINDOW_S = 60.0


@dataclass
class _Group:
    """Working state of one group during a plan."""

    snap: GroupSnapshot
    busy: list[SliceView]
    idle: list[SliceView]
    booting: list[SliceView]
    backoff: BackoffState
    packer: SlicePacker
    terminates: list[TerminateSlice] = field(default_factory=list[TerminateSlice])
    hinted_jobs: list[str] = field(default_factory=list[str])
    capped: bool = False  # demand could not fit under max_slices
    unplaced_tasks: int = 0  # tasks routed here first that no slice could take

    @property
    def name(self) -> str:
        return self.snap.config.name


def plan(snapshot: AutoscalerSnapshot, now: float) -> AutoscalerPlan:
    timings = snapshot.timings
    actions: list[ScaleAction] = []
    groups = [_health(g, now, timings, actions) for g in snapshot.groups]
    order = sorted(groups, key=lambda g: (g.snap.config.priority, g.name))
    unmet, hints = _route(snapshot.demand, order, now)

    creates: list[CreateSlice] = []
    terminates: list[TerminateSlice] = []
    decisions: list[GroupDecision] = []
    for group in groups:
        decision, group_creates, group_terminates = _decide(group, now, timings, actions)
        decisions.append(decision)
        creates += group_creates
        terminates += group_terminates
        for job_id in group.hinted_jobs:
            hints[job_id] = f"waiting for scale group {group.name}: {decision.status}"
    return AutoscalerPlan(
        creates=tuple(creates),
        terminates=tuple(terminates),
        groups=tuple(decisions),
        actions=tuple(actions),
        unmet=tuple(unmet),
        hints=hints,
    )


# ---------------------------------------------------------------- 1. health and backoff


def _health(
    snap: GroupSnapshot, now: float, timings: AutoscalerDefaults, actions: list[ScaleAction]
) -> _Group:
    config = snap.config
    boot_timeout = config.boot_timeout_s if config.boot_timeout_s is not None else timings.boot_timeout_s
    busy: list[SliceView] = []
    idle: list[SliceView] = []
    booting: list[SliceView] = []
    terminates: list[TerminateSlice] = []
    new_failures = 0
    for s in snap.slices:
        if s.state is SliceState.FAILED:
            if s.ready_at is None:
                reason = f"boot failed: {s.error or 'no error reported'}"
                kind, new_failures = ActionKind.BOOT_FAILED, new_failures + 1
            else:
                reason = f"slice failed: {s.error or 'no error reported'}"
                kind = ActionKind.SLICE_FAILED
            terminates.append(
                TerminateSlice(config.name, s.slice_id, reason, s.ready_at is None, s.worker_ids)
            )
            actions.append(ScaleAction(now, config.name, kind, s.slice_id, reason))
        elif s.state is not SliceState.READY and now - s.created_at > boot_timeout:
            reason = f"boot timeout: not ready after {_dur(now - s.created_at)} (limit {_dur(boot_timeout)})"
            new_failures += 1
            terminates.append(TerminateSlice(config.name, s.slice_id, reason, True, s.worker_ids))
            actions.append(ScaleAction(now, config.name, ActionKind.BOOT_TIMEOUT, s.slice_id, reason))
        elif s.state is SliceState.READY:
            (busy if s.idle_since is None else idle).append(s)
        else:
            booting.append(s)

    backoff = _update_backoff(snap, busy + idle, new_failures, now, timings, actions)
    in_backoff = backoff.active(now)
    packer = SlicePacker(
        config,
        free_existing=0 if in_backoff else len(idle) + len(booting),
        limit=0 if in_backoff else config.max_slices - len(busy),
    )
    return _Group(snap, busy, idle, booting, backoff, packer, terminates)


def _update_backoff(
    snap: GroupSnapshot,
    ready: Sequence[SliceView],
    new_failures: int,
    now: float,
    timings: AutoscalerDefaults,
    actions: list[ScaleAction],
) -> BackoffState:
    rules = timings.backoff
    backoff = snap.backoff
    newest_ready = max((s.ready_at for s in ready if s.ready_at is not None), default=None)
    if newest_ready is not None and newest_ready > backoff.last_success:
        backoff = replace(backoff, level=0, last_success=newest_ready)
    failures = tuple(t for t in backoff.failure_times if t > now - rules.window_s) + (now,) * new_failures
    backoff = replace(backoff, failure_times=failures)
    if backoff.active(now) or len(failures) < rules.failure_threshold:
        return backoff
    duration = min(rules.initial_s * rules.multiplier**backoff.level, rules.max_s)
    reason = f"{len(failures)} boot failures in {_dur(rules.window_s)}"
    actions.append(
        ScaleAction(
            now, snap.config.name, ActionKind.BACKOFF, None, f"no new slices for {_dur(duration)}: {reason}"
        )
    )
    return replace(backoff, failure_times=(), level=backoff.level + 1, until=now + duration, reason=reason)


# ---------------------------------------------------------------- 2. routing


def _route(
    demand: Sequence[DemandEntry], order: list[_Group], now: float
) -> tuple[list[UnmetDemand], dict[str, str]]:
    unmet: list[UnmetDemand] = []
    hints: dict[str, str] = {}
    for entry in demand:
        fitting: list[_Group] = []
        misfits: list[str] = []
        for group in order:
            misfit = group_misfit(
                group.snap.config, entry.resources, entry.constraints, entry.gang_size, entry.group_by
            )
            if misfit is None:
                fitting.append(group)
            else:
                misfits.append(f"{group.name}: {misfit}")
        if not fitting:
            reason = (
                "no scale group can run it (" + "; ".join(misfits) + ")" if misfits else "no scale groups"
            )
            unmet.append(UnmetDemand(entry.job_id, entry.task_ids, reason))
            hints.setdefault(entry.job_id, reason)
            continue
        remaining = _place(entry, fitting)
        if remaining:
            reason = "no capacity: " + ", ".join(_unavailable(g, now) for g in fitting)
            left = entry.task_ids if entry.is_gang else entry.task_ids[len(entry.task_ids) - remaining :]
            unmet.append(UnmetDemand(entry.job_id, left, reason))
            for group in fitting:
                group.capped = group.capped or not group.backoff.active(now)
            waits_for = next((g for g in fitting if not g.backoff.active(now)), fitting[0])
            waits_for.unplaced_tasks += entry.task_count if entry.is_gang else remaining
            hints.setdefault(entry.job_id, reason)
    return unmet, hints


def _place(entry: DemandEntry, fitting: list[_Group]) -> int:
    """Route an entry into existing slices first, then new ones; returns tasks left over."""
    remaining = 1 if entry.is_gang else entry.task_count
    for allow_new in (False, True):
        for group in fitting:
            if remaining == 0:
                return 0
            if entry.is_gang:
                placed = 1 if group.packer.place_gang(allow_new, entry.task_count) else 0
            else:
                placed = group.packer.place_tasks(entry.resources, remaining, allow_new)
            if placed:
                remaining -= placed
                if entry.job_id not in group.hinted_jobs:
                    group.hinted_jobs.append(entry.job_id)
    return remaining


def _unavailable(group: _Group, now: float) -> str:
    if group.backoff.active(now):
        return f"{group.name} in backoff ({group.backoff.reason})"
    return f"{group.name} at max_slices ({group.snap.config.max_slices})"


# ---------------------------------------------------------------- 3. per-group decisions


def _decide(
    group: _Group, now: float, timings: AutoscalerDefaults, actions: list[ScaleAction]
) -> tuple[GroupDecision, list[CreateSlice], list[TerminateSlice]]:
    config = group.snap.config
    name = config.name
    busy, idle, booting = len(group.busy), len(group.idle), len(group.booting)
    demand_slices = group.packer.opened
    target = min(max(busy + demand_slices + config.buffer_slices, config.min_slices), config.max_slices)
    current = busy + idle + booting
    status: list[str] = []

    creates: list[CreateSlice] = []
    next_seq = group.snap.next_seq
    recent = tuple(t for t in group.snap.recent_creates if t > now - _RATE_WINDOW_S)
    wanted = max(target - current, 0)
    if wanted and group.backoff.active(now):
        status.append(f"backoff: {group.backoff.reason}, retrying in {_dur(group.backoff.until - now)}")
    elif wanted:
        per_minute = config.max_creates_per_minute or timings.max_creates_per_minute
        allowed = max(min(wanted, timings.max_creates_per_evaluation, per_minute - len(recent)), 0)
        why = _create_reason(group, demand_slices, busy, target)
        for _ in range(allowed):
            slice_id = f"{name}-{next_seq}"
            next_seq += 1
            creates.append(CreateSlice(name, slice_id, why))
            actions.append(ScaleAction(now, name, ActionKind.SCALE_UP, slice_id, why))
        recent += (now,) * allowed
        if allowed:
            status.append(f"scaling up {allowed} slice(s): {why}")
        if allowed < wanted:
            status.append(
                f"rate limited: {wanted - allowed} slice(s) deferred "
                f"(at most {timings.max_creates_per_evaluation} per evaluation, {per_minute} per minute)"
            )
    elif booting and group.packer.tasks:
        status.append(f"waiting for {booting} booting slice(s)")

    terminates = list(group.terminates)
    delay = config.scale_down_delay_s if config.scale_down_delay_s is not None else timings.scale_down_delay_s
    excess = busy + idle - target
    if excess > 0:
        by_idle_time = sorted(group.idle, key=lambda s: (s.idle_since, s.slice_id))
        for s in by_idle_time:
            assert s.idle_since is not None
            idle_for = now - s.idle_since
            if excess > 0 and idle_for >= delay:
                reason = f"idle {_dur(idle_for)} >= {_dur(delay)} (target {target})"
                terminates.append(TerminateSlice(name, s.slice_id, reason, False, s.worker_ids))
                actions.append(ScaleAction(now, name, ActionKind.SCALE_DOWN, s.slice_id, reason))
                status.append(f"scaling down {s.slice_id}: {reason}")
                excess -= 1
            elif excess > 0:
                status.append(f"idle: slice {s.slice_id} idle {_dur(idle_for)}, removed after {_dur(delay)}")
                break
    if group.capped:
        status.append(f"at max_slices ({config.max_slices})")
    if group.backoff.active(now) and not wanted:
        status.append(f"backoff: {group.backoff.reason}, retrying in {_dur(group.backoff.until - now)}")
    if not status:
        status.append(f"steady: {busy + idle} ready, {booting} booting, target {target}")

    decision = GroupDecision(
        group=name,
        target=target,
        demand_tasks=group.packer.tasks,
        demand_slices=demand_slices,
        waiting_tasks=group.packer.tasks + group.unplaced_tasks,
        busy=busy,
        idle=idle,
        booting=booting,
        creates=tuple(c.slice_id for c in creates),
        terminates=tuple(t.slice_id for t in terminates),
        backoff=group.backoff,
        next_seq=next_seq,
        recent_creates=recent,
        status="; ".join(status),
    )
    return decision, creates, terminates


def _create_reason(group: _Group, demand_slices: int, busy: int, target: int) -> str:
    config = group.snap.config
    if demand_slices > len(group.idle) + len(group.booting):
        return f"{group.packer.tasks} pending task(s) need {demand_slices} slice(s)"
    if target == config.min_slices and busy + demand_slices + config.buffer_slices < config.min_slices:
        return f"keeping min_slices={config.min_slices}"
    return f"keeping buffer_slices={config.buffer_slices} spare"


def _dur(seconds: float) -> str:
    seconds = max(seconds, 0.0)
    if seconds < 120:
        return f"{seconds:.0f}s"
    if seconds < 7200:
        minutes, secs = divmod(int(round(seconds)), 60)
        return f"{minutes}m{secs:02d}s" if secs else f"{minutes}m"
    return f"{seconds / 3600:.1f}h"
