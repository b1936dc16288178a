"""The KUBERNETES backend's seam of the controller: one desired group for the whole cluster (every
live attempt as a Pod), converged by the backend each round; what it observed is folded like a
worker's report. Kueue, not the Iris scheduler, decides where Pods run."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from iris.cluster.controller import store
from iris.cluster.controller.backend import DesiredGroup
from iris.cluster.controller.reconcile_kernel import asked
from iris.rpc.models import AttemptObservation

if TYPE_CHECKING:
    from iris.cluster.controller.controller import Controller

log = logging.getLogger("iris.controller")


class PodSeam:
    def __init__(self, controller: Controller) -> None:
        self.c = controller

    def reconcile(self) -> bool:
        c = self.c
        if c.backend is None:
            return False
        with c.db.read() as cur:
            live = store.unreleased_attempts(cur)
        group = DesiredGroup(tuple(c.desired(live)))
        observations: dict[str, AttemptObservation] = {}
        for report in c.backend.converge([group]):
            if report.observations is None:
                log.warning("pod reconcile skipped this round: %s", report.error)
                return False
            observations.update(asked(group, report))
        return c.fold(observations, c.clock())
