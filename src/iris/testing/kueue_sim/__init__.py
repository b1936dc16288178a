"""A Kueue simulator for the fake API server: gate, admit by quota and priority, preempt, evict."""

from iris.testing.kueue_sim.names import (
    ADMISSION_GATE,
    EVICTION_STOP_PREFIX,
    MANAGED_FINALIZER,
    POD_GROUP_NAME_LABEL,
    POD_GROUP_TOTAL_COUNT_ANNOTATION,
    PREEMPTION_REASON,
    PRIORITY_CLASS_LABEL,
    QUEUE_NAME_LABEL,
    RETRIABLE_IN_GROUP_ANNOTATION,
    TERMINATION_TARGET,
)
from iris.testing.kueue_sim.quota import (
    Candidate,
    Flavor,
    Plan,
    QueueSpec,
    ResourceGroup,
    assign_flavors,
    plan_admission,
)
from iris.testing.kueue_sim.simulator import KueueSimulator

__all__ = [
    "ADMISSION_GATE",
    "EVICTION_STOP_PREFIX",
    "MANAGED_FINALIZER",
    "POD_GROUP_NAME_LABEL",
    "POD_GROUP_TOTAL_COUNT_ANNOTATION",
    "PREEMPTION_REASON",
    "PRIORITY_CLASS_LABEL",
    "QUEUE_NAME_LABEL",
    "RETRIABLE_IN_GROUP_ANNOTATION",
    "TERMINATION_TARGET",
    "Candidate",
    "Flavor",
    "KueueSimulator",
    "Plan",
    "QueueSpec",
    "ResourceGroup",
    "assign_flavors",
    "plan_admission",
]
