"""The worker side of the Reconcile protocol as a pure function: desired set + local facts in, plan out.

Rules (iris-core §4.2): the request is the COMPLETE desired set. A run intent for a known attempt
is a no-op; an unknown one starts from the inline spec or the cached one, else it is MISSING. A stop
intent kills a live attempt (idempotent). A live local attempt absent from the set is a zombie: it is
killed and reported once, in the answer that kills it (a zombie still dying is not reported again:
the controller never asked about it). Observations cover the attempts asked about plus the new
zombies, nothing else.
A newly started attempt supersedes (kills) a live local attempt of the same task: one task never
runs twice on a worker.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass

from iris.rpc.enums import StopReason
from iris.rpc.models import DesiredAttempt, RunSpec


@dataclass(frozen=True, slots=True)
class ReconcilePlan:
    # Specs that arrived inline (to cache), and attempts to start now (inline or cached spec).
    cache: tuple[RunSpec, ...] = ()
    start: tuple[RunSpec, ...] = ()
    # Attempt uid -> reason: a spec that does not match its desired entry.
    reject: tuple[tuple[str, str], ...] = ()
    stop: tuple[tuple[str, StopReason], ...] = ()
    # (older live attempt, newer attempt of the same task that replaces it)
    supersede: tuple[tuple[str, str], ...] = ()
    zombies: tuple[str, ...] = ()
    missing: tuple[str, ...] = ()
    # Every uid to report, in request order, then the zombies.
    observe: tuple[str, ...] = ()
    # uids still desired (their cached specs are kept, everything else is dropped from the cache).
    desired: frozenset[str] = frozenset()


def plan_worker_reconcile(
    desired: Sequence[DesiredAttempt],
    local_terminal: Mapping[str, bool],
    cached_specs: Mapping[str, RunSpec],
    live_task_ids: Mapping[str, str] | None = None,
    killed_zombies: AbstractSet[str] = frozenset(),
) -> ReconcilePlan:
    """``local_terminal`` maps every attempt the worker knows to whether it has ended;
    ``live_task_ids`` maps each live local attempt to its task id; ``killed_zombies`` are the
    zombies an earlier reconcile already killed and reported (their process may still be ending)."""
    cache: list[RunSpec] = []
    start: list[RunSpec] = []
    reject: list[tuple[str, str]] = []
    stop: list[tuple[str, StopReason]] = []
    missing: list[str] = []
    observe: list[str] = []
    seen: set[str] = set()
    for entry in desired:
        uid = entry.attempt_uid
        if uid in seen:
            continue  # a duplicate entry: the first one wins
        seen.add(uid)
        observe.append(uid)
        known = uid in local_terminal
        if entry.intent == "stop":
            if known and not local_terminal[uid]:
                stop.append((uid, entry.stop_reason or StopReason.CANCELLED))
            elif not known:
                missing.append(uid)
            continue
        if known:
            continue
        spec = entry.spec
        if spec is not None and spec.attempt_uid != uid:
            reject.append((uid, f"the spec sent for attempt {uid} names attempt {spec.attempt_uid}"))
            continue
        if spec is not None:
            cache.append(spec)
        else:
            spec = cached_specs.get(uid)
        if spec is None:
            missing.append(uid)
        else:
            start.append(spec)
    unasked = [uid for uid, terminal in local_terminal.items() if not terminal and uid not in seen]
    zombies = tuple(uid for uid in unasked if uid not in killed_zombies)
    stopping = {uid for uid, _ in stop} | set(unasked)
    by_task: dict[str, list[str]] = {}
    for uid, task_id in (live_task_ids or {}).items():
        if uid not in stopping:
            by_task.setdefault(task_id, []).append(uid)
    supersede = tuple(
        (old, new.attempt_uid)
        for new in start
        for old in by_task.get(new.task_id, ())
        if old != new.attempt_uid
    )
    return ReconcilePlan(
        cache=tuple(cache),
        start=tuple(start),
        reject=tuple(reject),
        stop=tuple(stop),
        supersede=supersede,
        zombies=zombies,
        missing=tuple(missing),
        observe=(*observe, *zombies),
        desired=frozenset(seen),
    )
