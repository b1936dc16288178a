"""Each user's recent usage for fair share: cpu-seconds, decayed with a half-life.

Kept incrementally: each scheduling pass reports how many cpu cores each user's running work
holds now (``observe``); the ledger integrates the previous rates over the time since the last
report and decays what was there, so a pass costs O(users), never a scan of past tasks.
No clock: ``now`` is an argument.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

HALF_LIFE_S = 3600.0  # usage an hour ago counts half
_FORGET_BELOW = 1e-3  # cpu-seconds: a user with less and nothing running is dropped


class UsageLedger:
    def __init__(self, half_life_s: float = HALF_LIFE_S) -> None:
        self.half_life_s = half_life_s
        self._values: dict[str, float] = {}  # decayed cpu-seconds at ``_at``
        self._rates: dict[str, float] = {}  # cpu cores held since ``_at``
        self._at: float | None = None

    def _advanced(self, now: float) -> dict[str, float]:
        if self._at is None or now <= self._at:
            return dict(self._values)
        dt = now - self._at
        keep = 0.5 ** (dt / self.half_life_s)
        gained = self.half_life_s / math.log(2) * (1 - keep)  # integral of a constant rate, decayed
        out = {user: value * keep for user, value in self._values.items()}
        for user, rate in self._rates.items():
            out[user] = out.get(user, 0.0) + rate * gained
        return out

    def observe(self, now: float, cores_by_user: Mapping[str, float]) -> None:
        """The cores each user's work holds from ``now`` on (users not named: none)."""
        values = self._advanced(now)
        self._values = {u: v for u, v in values.items() if v >= _FORGET_BELOW or u in cores_by_user}
        self._rates = {u: c for u, c in cores_by_user.items() if c > 0}
        self._at = now if self._at is None else max(self._at, now)

    def usage(self, now: float) -> dict[str, float]:
        """Each user's decayed cpu-seconds as of ``now``."""
        return self._advanced(now)
