"""Per-user budgets: stored in the controller's DB (``iris user budget set``), with defaults
from the cluster config's ``user_budgets`` (a ``"*"`` entry applies to every user without one).

The scheduler reads ``effective()`` each pass (a dict kept until a budget changes); the gate
itself is ``scheduler/gates.py``. On KUBERNETES, Kueue admits work: see docs/budgets.md.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Mapping

from iris.cluster.controller.db import ControllerDB
from iris.cluster.controller.scheduler.gates import EVERYONE, Budget
from iris.rpc.errors import InvalidArgument
from iris.rpc.models import UserBudget, UserBudgetInfo

_USER = re.compile(r"[A-Za-z0-9_.@-]{1,64}")


def check_user(user: str) -> str:
    if user != EVERYONE and not _USER.fullmatch(user):
        raise InvalidArgument(
            f"{user!r} is not a user name: 1-64 letters, digits, '_', '.', '@' or '-' (or * for everyone)"
        )
    return user


class Budgets:
    def __init__(self, db: ControllerDB, defaults: Mapping[str, UserBudget] | None = None) -> None:
        self._db = db
        self._lock = threading.Lock()
        self._defaults: dict[str, UserBudget] = dict(defaults or {})
        self._effective: dict[str, Budget] | None = None

    def set_defaults(self, defaults: Mapping[str, UserBudget]) -> None:
        """The cluster config's ``user_budgets`` (a stored budget of the same user wins)."""
        with self._lock:
            self._defaults = dict(defaults)
            self._effective = None

    def effective(self) -> dict[str, Budget]:
        """user -> Budget, as the gates apply them (the same dict until a budget changes)."""
        found = self._effective
        if found is None:
            found = {user: Budget.from_wire(info.budget) for user, info in self._all().items()}
            with self._lock:
                self._effective = found
        return found

    def for_user(self, user: str) -> Budget | None:
        budgets = self.effective()
        return budgets.get(user, budgets.get(EVERYONE))

    def _all(self) -> dict[str, UserBudgetInfo]:
        out = {
            user: UserBudgetInfo(user=user, budget=budget, source="config")
            for user, budget in self._defaults.items()
        }
        with self._db.read() as cur:
            rows = cur.execute("SELECT user, budget_json, updated_at FROM user_budgets").fetchall()
        for user, text, updated_at in rows:
            out[user] = UserBudgetInfo(
                user=user, budget=UserBudget.model_validate_json(text), source="api", updated_at=updated_at
            )
        return out

    def list(self) -> list[UserBudgetInfo]:
        return sorted(self._all().values(), key=lambda info: info.user)

    def get(self, user: str) -> UserBudgetInfo | None:
        """The user's own budget, else the ``*`` default (None: unlimited)."""
        found = self._all()
        return found.get(check_user(user)) or found.get(EVERYONE)

    def set(self, user: str, budget: UserBudget, now: float) -> UserBudgetInfo:
        check_user(user)
        with self._db.transaction() as cur:
            cur.execute(
                "INSERT INTO user_budgets (user, budget_json, updated_at) VALUES (?, ?, ?)"
                " ON CONFLICT (user) DO UPDATE SET budget_json = excluded.budget_json,"
                " updated_at = excluded.updated_at",
                (user, budget.model_dump_json(exclude_none=True), now),
            )
            self._db.after_commit(self._changed)
        return UserBudgetInfo(user=user, budget=budget, source="api", updated_at=now)

    def remove(self, user: str) -> bool:
        """Drop the user's stored budget (a config default, if any, applies again)."""
        with self._db.transaction() as cur:
            removed = cur.execute("DELETE FROM user_budgets WHERE user = ?", (check_user(user),)).rowcount > 0
            self._db.after_commit(self._changed)
        return removed

    def _changed(self) -> None:
        with self._lock:
            self._effective = None
