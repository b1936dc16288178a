"""Gates: may a unit of pending work be tried at all this pass? Pure functions, no I/O.

A pass (``kernel.schedule``) orders pending work, then asks the gates about each unit before
trying to place it: a gate returns ``None`` (go on) or a ``Reason`` the unit waits with. A unit a
gate holds is neither placed nor allowed to preempt, and the pass goes on with the next one.
What a placed unit holds is charged (``Held.add``) so later units of the same user see it.

Gates today, in the order they run:

- ``budget_gate``: a user's running work never exceeds the user's budget (cpu, memory, gpu,
  tpu; ``iris user budget set``); the rest waits ("user budget: alice uses 4 of 4 cpu").

Submit-time checks of the same budgets (a job that could never pass the gate, a band above the
user's ``max_band``) are ``admission_refusal``: the controller refuses such a job at once.

A new policy is one more function here, called from ``gate`` (and a row in its table test,
tests/controller/scheduler/test_gates.py).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from iris.rpc.enums import PriorityBand
from iris.rpc.models import UserBudget

from .formatting import format_bytes, format_cpu
from .model import ReasonCode, Resources, RunningTask

Reason = tuple[str, str]  # (code, message), as in reasons.py
EVERYONE = "*"  # a budget under this name applies to every user without their own


@dataclass(frozen=True, slots=True)
class Budget:
    """A user's limits (None: unlimited) and the most important band they may submit at."""

    cpu_millicores: int | None = None
    memory_bytes: int | None = None
    gpu: int | None = None
    tpu: int | None = None
    max_band: PriorityBand | None = None

    @classmethod
    def from_wire(cls, b: UserBudget) -> Budget:
        return cls(b.cpu_millicores, b.memory_bytes, b.gpu, b.tpu, b.max_band)

    @property
    def limits_resources(self) -> bool:
        return any(x is not None for x in (self.cpu_millicores, self.memory_bytes, self.gpu, self.tpu))


@dataclass(slots=True)
class Held:
    """What one user's unreleased work holds (and, within a pass, what the pass gave it)."""

    cpu_millicores: int = 0
    memory_bytes: int = 0
    gpu: int = 0
    tpu: int = 0

    def add(self, r: Resources, count: int = 1) -> None:
        self.cpu_millicores += r.cpu_millicores * count
        self.memory_bytes += r.memory_bytes * count
        if r.device_type == "gpu":
            self.gpu += r.device_count * count
        elif r.device_type == "tpu":
            self.tpu += r.device_count * count


def user_of(job_id: str) -> str:
    """``/alice/train/sub`` -> ``alice`` (a job id's first component is its user)."""
    return job_id.split("/", 2)[1] if job_id.startswith("/") else job_id.split("/", 1)[0]


def held_by_user(running: Iterable[RunningTask], users: Iterable[str] | None = None) -> dict[str, Held]:
    """What each user's unreleased attempts hold (stopping ones too: their room is not free yet).
    ``users``: only these (the ones with a budget), so a pass without budgets adds nothing."""
    wanted = None if users is None else set(users)
    held: dict[str, Held] = {}
    if wanted is not None and not wanted:
        return held
    for t in running:
        user = t.user or user_of(t.job_id)
        if wanted is not None and user not in wanted:
            continue
        h = held.get(user)
        if h is None:
            h = held[user] = Held()
        h.add(t.resources)
    return held


def _amounts(b: Budget, h: Held, ask: Resources, count: int) -> Iterable[tuple[int | None, int, int, str]]:
    gpu = ask.device_count if ask.device_type == "gpu" else 0
    tpu = ask.device_count if ask.device_type == "tpu" else 0
    yield b.cpu_millicores, h.cpu_millicores, ask.cpu_millicores * count, "cpu"
    yield b.memory_bytes, h.memory_bytes, ask.memory_bytes * count, "memory"
    yield b.gpu, h.gpu, gpu * count, "gpu"
    yield b.tpu, h.tpu, tpu * count, "tpu"


def _amount(kind: str, n: int) -> str:
    """``4 cpu``, ``16GB memory``, ``2 gpu``."""
    if kind == "cpu":
        return format_cpu(n)
    if kind == "memory":
        return f"{format_bytes(n)} memory"
    return f"{n} {kind}"


def _uses(kind: str, used: int, limit: int) -> str:
    """``4 of 4 cpu``, ``8GB of 16GB memory``."""
    number = _amount(kind, used).rsplit(" ", 1)[0]
    return f"{number} of {_amount(kind, limit)}"


def budget_gate(
    user: str, ask: Resources, count: int, budget: Budget | None, held: Held | None
) -> Reason | None:
    """Hold ``count`` tasks asking ``ask`` each when the user's work would then exceed a limit."""
    if budget is None:
        return None
    h = held or Held()
    for limit, used, more, kind in _amounts(budget, h, ask, count):
        if limit is not None and more and used + more > limit:
            return ReasonCode.BUDGET, f"user budget: {user} uses {_uses(kind, used, limit)}"
    return None


def gate(
    user: str,
    ask: Resources,
    count: int,
    budgets: Mapping[str, Budget],
    held: Mapping[str, Held],
) -> Reason | None:
    """Every gate, in order; the first that holds the unit names why."""
    return budget_gate(user, ask, count, budgets.get(user, budgets.get(EVERYONE)), held.get(user))


def admission_refusal(
    user: str, band: PriorityBand, ask: Resources, count: int, budget: Budget | None, *, admin: bool
) -> str | None:
    """Why a job can never be admitted (one sentence), or None: a band above the user's
    ``max_band``; PRODUCTION without admin rights or a budget allowing it; or one task (a gang:
    all its tasks) larger than the budget even with nothing else running."""
    max_band = budget.max_band if budget is not None else None
    if max_band is not None and band.rank < max_band.rank:
        return (
            f"{user} may submit at {max_band.value} priority or lower (their budget); "
            f"this job asks for {band.value}"
        )
    if band is PriorityBand.PRODUCTION and not admin and max_band is not PriorityBand.PRODUCTION:
        return (
            "PRODUCTION priority is for admins, or users whose budget allows it "
            "(iris user budget set USER --max-band PRODUCTION)"
        )
    if budget is None:
        return None
    for limit, _, more, kind in _amounts(budget, Held(), ask, count):
        if limit is not None and more > limit:
            return (
                f"this job can never run within {user}'s budget: it needs {_amount(kind, more)} at once"
                f" and the budget allows {_amount(kind, limit)}"
            )
    return None
