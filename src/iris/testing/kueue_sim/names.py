"""Kueue's label, annotation, gate and finalizer names for plain pods and pod groups."""

QUEUE_NAME_LABEL = "kueue.x-k8s.io/queue-name"
PRIORITY_CLASS_LABEL = "kueue.x-k8s.io/priority-class"
POD_GROUP_NAME_LABEL = "kueue.x-k8s.io/pod-group-name"
POD_GROUP_TOTAL_COUNT_ANNOTATION = "kueue.x-k8s.io/pod-group-total-count"
MANAGED_LABEL = "kueue.x-k8s.io/managed"
MANAGED_FINALIZER = "kueue.x-k8s.io/managed"
ADMISSION_GATE = "kueue.x-k8s.io/admission"
WORKLOAD_ANNOTATION = "kueue.x-k8s.io/workload"
RETRIABLE_IN_GROUP_ANNOTATION = "kueue.x-k8s.io/retriable-in-group"
# Kueue stops a pod by setting this condition (reason = its stop reason), then deleting the pod.
TERMINATION_TARGET = "TerminationTarget"
# The stop reason of an evicted workload is this prefix + the Workload's Evicted reason.
EVICTION_STOP_PREFIX = "WorkloadEvictedDueTo"
# The Workload's Evicted reason when a higher-priority workload took its quota.
PREEMPTION_REASON = "Preempted"
