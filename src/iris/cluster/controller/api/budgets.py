"""Per-user budgets (the scheduler's first gate): anyone reads, admins change."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import Response

from iris.cluster.controller.api.common import who
from iris.cluster.controller.controller import Controller
from iris.rpc.errors import (
    NotFound,
    PermissionDenied,
)
from iris.rpc.models import (
    UserBudget,
    UserBudgetInfo,
    UserBudgetList,
)


def add_routes(router: APIRouter, controller: Controller) -> None:

    # ---- per-user budgets (the scheduler's first gate): anyone reads, admins change

    @router.get("/api/v1/budgets", response_model=UserBudgetList)
    def list_budgets() -> UserBudgetList:
        who().may_use_jobs()
        return UserBudgetList(budgets=controller.budgets.list())

    @router.get("/api/v1/budgets/{user}", response_model=UserBudgetInfo)
    def get_budget(user: str) -> UserBudgetInfo:
        who().may_use_jobs()
        found = controller.budgets.get(user)
        if found is None:
            raise NotFound(f"{user} has no budget: their work is limited by the cluster's capacity only")
        return found

    def budget_admin() -> None:
        if not who().is_admin:
            raise PermissionDenied("only an admin may change user budgets")

    @router.put("/api/v1/budgets/{user}", response_model=UserBudgetInfo)
    def put_budget(user: str, budget: UserBudget) -> UserBudgetInfo:
        budget_admin()
        return controller.set_budget(user, budget)

    @router.delete("/api/v1/budgets/{user}", status_code=204)
    def delete_budget(user: str) -> Response:
        budget_admin()
        if not controller.remove_budget(user):
            raise NotFound(f"{user} has no budget set by iris user budget set")
        return Response(status_code=204)
