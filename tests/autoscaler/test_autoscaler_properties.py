"""Properties of the planner over random fleets and demand."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from iris.cluster.controller.autoscaler import (
    ActionKind,
    AutoscalerSnapshot,
    BackoffState,
    DemandEntry,
    GroupSnapshot,
    SliceView,
    plan,
)
from iris.cluster.platforms import SliceState

from .helpers import TIMINGS, demand, group

NOW = 10_000.0


@st.composite
def slices(draw: st.DrawFn, name: str) -> tuple[SliceView, ...]:
    out = []
    for i in range(draw(st.integers(0, 6))):
        state = draw(st.sampled_from(list(SliceState)))
        created = NOW - draw(st.floats(0, 1000))
        ready_at = created + 1 if state is SliceState.READY or draw(st.booleans()) else None
        idle_since = None
        if state is SliceState.READY and draw(st.booleans()):
            idle_since = NOW - draw(st.floats(0, 200))
        out.append(SliceView(f"{name}-{i}", state, created, ready_at, idle_since))
    return tuple(out)


@st.composite
def group_snapshots(draw: st.DrawFn, name: str) -> GroupSnapshot:
    max_slices = draw(st.integers(0, 8))
    config = group(
        name,
        cpu=draw(st.sampled_from([1, 2, 4])),
        memory="4GB",
        min_slices=draw(st.integers(0, max_slices)),
        max_slices=max_slices,
        buffer_slices=draw(st.integers(0, 3)),
        num_vms=draw(st.integers(1, 4)),
        priority=draw(st.integers(0, 3)),
        max_creates_per_minute=draw(st.integers(1, 20)),
    )
    failures = tuple(NOW - draw(st.floats(0, 900)) for _ in range(draw(st.integers(0, 4))))
    until = NOW + draw(st.floats(-100, 100)) if draw(st.booleans()) else 0.0
    backoff = BackoffState(failure_times=failures, level=draw(st.integers(0, 3)), until=until, reason="r")
    recent = tuple(NOW - draw(st.floats(0, 120)) for _ in range(draw(st.integers(0, 5))))
    return GroupSnapshot(config, draw(slices(name)), backoff, 100, recent)


demand_entries = st.lists(
    st.builds(
        lambda i, n, cpu, gang: demand(
            f"/u/j{i}", n, cpu=cpu, memory="1GB", group_by="slice" if gang else None
        ),
        st.integers(0, 1000),
        st.integers(1, 6),
        st.sampled_from([0.5, 1, 2, 3]),
        st.booleans(),
    ),
    max_size=6,
)


@st.composite
def snapshots(draw: st.DrawFn) -> AutoscalerSnapshot:
    groups = tuple(draw(group_snapshots(name)) for name in ("a", "b", "c")[: draw(st.integers(1, 3))])
    entries: list[DemandEntry] = draw(demand_entries)
    return AutoscalerSnapshot(groups, tuple(entries), TIMINGS)


def _unhealthy(s: SliceView, boot_timeout: float) -> bool:
    return s.state is SliceState.FAILED or (
        s.state is not SliceState.READY and NOW - s.created_at > boot_timeout
    )


@settings(max_examples=300, deadline=None)
@given(snapshots())
def test_planner_invariants(snapshot: AutoscalerSnapshot) -> None:
    result = plan(snapshot, NOW)
    terminated = {t.slice_id for t in result.terminates}
    idle_removals = {a.slice_id for a in result.actions if a.action is ActionKind.SCALE_DOWN}
    for g in snapshot.groups:
        config = g.config
        decision = result.group(config.name)
        creates = [c for c in result.creates if c.group == config.name]
        healthy = [s for s in g.slices if not _unhealthy(s, TIMINGS.boot_timeout_s)]
        kept = [s for s in healthy if s.slice_id not in terminated]

        # never above max: creates only while the group stays within max_slices
        if creates:
            assert len(healthy) + len(creates) <= config.max_slices

        # never below min because of scale-down
        if idle_removals & {s.slice_id for s in g.slices}:
            assert len(kept) >= config.min_slices
            assert len(kept) >= decision.target

        # never a slice with running tasks; only failed, timed out or idle READY slices
        for s in g.slices:
            if s.slice_id in terminated:
                assert not s.busy
                assert _unhealthy(s, TIMINGS.boot_timeout_s) or (
                    s.state is SliceState.READY and s.idle_since is not None
                )

        # creates only for groups not in backoff (after this evaluation's failures)
        if creates:
            assert not decision.backoff.active(NOW)

        # rate limits hold
        recent = [t for t in g.recent_creates if t > NOW - 60]
        assert len(creates) <= TIMINGS.max_creates_per_evaluation
        assert len(recent) + len(creates) <= max(config.max_creates_per_minute or 0, len(recent))

        # target is always within [min, max]
        assert (
            config.min_slices <= decision.target <= config.max_slices or config.max_slices < config.min_slices
        )

    # created ids are fresh and unique
    ids = [c.slice_id for c in result.creates]
    existing = {s.slice_id for g in snapshot.groups for s in g.slices}
    assert len(ids) == len(set(ids)) and not set(ids) & existing


@settings(max_examples=200, deadline=None)
@given(snapshots())
def test_every_demanded_task_is_routed_or_reported(snapshot: AutoscalerSnapshot) -> None:
    result = plan(snapshot, NOW)
    unmet_jobs = {u.job_id for u in result.unmet}
    for entry in snapshot.demand:
        assert entry.job_id in result.hints or entry.job_id in unmet_jobs
