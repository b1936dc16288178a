"""Pod status transitions the kubelet reports, as pure functions over a status dict.

Only the first container is really executed; the other containers (and init containers) are
reported alongside it so the pod reads as one unit: waiting, running or terminated together.
Conditions set by others (e.g. Kueue's DisruptionTarget) are preserved.
"""

from __future__ import annotations

from typing import Any

from iris.testing.kubelet_sim.conditions import set_condition
from iris.testing.kubelet_sim.k8s_types import utc_timestamp

POD_IP = "127.0.0.1"


def _image_id(image: str) -> str:
    return f"iris-fake://{image}"


def _container_statuses(
    pod: dict[str, Any], state: dict[str, Any], *, ready: bool, container_id: str = ""
) -> list[dict[str, Any]]:
    statuses = []
    for container in (pod.get("spec") or {}).get("containers") or []:
        entry: dict[str, Any] = {
            "name": container["name"],
            "image": container.get("image", ""),
            "imageID": _image_id(container.get("image", "")) if "waiting" not in state else "",
            "ready": ready,
            "started": "running" in state,
            "restartCount": 0,
            "state": state,
            "lastState": {},
        }
        if container_id:
            entry["containerID"] = container_id
        statuses.append(entry)
    return statuses


def _init_statuses(pod: dict[str, Any]) -> list[dict[str, Any]]:
    statuses = []
    for container in (pod.get("spec") or {}).get("initContainers") or []:
        sidecar = container.get("restartPolicy") == "Always"
        state = (
            {"running": {"startedAt": utc_timestamp()}}
            if sidecar
            else {"terminated": {"exitCode": 0, "reason": "Completed"}}
        )
        statuses.append(
            {
                "name": container["name"],
                "image": container.get("image", ""),
                "imageID": _image_id(container.get("image", "")),
                "ready": sidecar,
                "started": sidecar,
                "restartCount": 0,
                "state": state,
            }  # fmt: skip
        )
    return statuses


def scheduled(status: dict[str, Any], pod: dict[str, Any], start_time: str) -> dict[str, Any]:
    """Bound to a node, containers being created."""
    result = dict(status)
    conditions = set_condition(result.get("conditions"), "PodScheduled", "True", "", "")
    conditions = set_condition(conditions, "Initialized", "True", "", "")
    conditions = set_condition(
        conditions, "Ready", "False", "ContainersNotReady", "containers with unready status"
    )
    conditions = set_condition(
        conditions, "ContainersReady", "False", "ContainersNotReady", "containers with unready status"
    )
    result.update(
        phase="Pending",
        conditions=conditions,
        hostIP=POD_IP,
        hostIPs=[{"ip": POD_IP}],
        startTime=start_time,
        containerStatuses=_container_statuses(pod, {"waiting": {"reason": "ContainerCreating"}}, ready=False),
    )
    if (pod.get("spec") or {}).get("initContainers"):
        result["initContainerStatuses"] = _init_statuses(pod)
    return result


def unschedulable(status: dict[str, Any], message: str) -> dict[str, Any]:
    result = dict(status)
    result["phase"] = "Pending"
    result["conditions"] = set_condition(
        result.get("conditions"), "PodScheduled", "False", "Unschedulable", message
    )
    return result


def waiting(status: dict[str, Any], pod: dict[str, Any], reason: str, message: str) -> dict[str, Any]:
    """A container that cannot start (ErrImagePull, ImagePullBackOff, CreateContainerConfigError)."""
    result = dict(status)
    result["containerStatuses"] = _container_statuses(
        pod, {"waiting": {"reason": reason, "message": message}}, ready=False
    )
    return result


def running(
    status: dict[str, Any], pod: dict[str, Any], started_at: str, container_id: str
) -> dict[str, Any]:
    result = dict(status)
    conditions = set_condition(result.get("conditions"), "Ready", "True", "", "")
    conditions = set_condition(conditions, "ContainersReady", "True", "", "")
    conditions = set_condition(conditions, "PodReadyToStartContainers", "True", "", "")
    result.update(
        phase="Running",
        conditions=conditions,
        podIP=POD_IP,
        podIPs=[{"ip": POD_IP}],
        containerStatuses=_container_statuses(
            pod, {"running": {"startedAt": started_at}}, ready=True, container_id=container_id
        ),
    )
    return result


def terminated(
    status: dict[str, Any],
    pod: dict[str, Any],
    *,
    exit_code: int,
    reason: str,
    started_at: str,
    finished_at: str,
    container_id: str = "",
    message: str = "",
    pod_reason: str = "",
    pod_message: str = "",
) -> dict[str, Any]:
    """The container ended; the pod is Succeeded on exit 0, Failed otherwise (no restarts)."""
    result = dict(status)
    phase = "Succeeded" if exit_code == 0 and not pod_reason else "Failed"
    state: dict[str, Any] = {
        "exitCode": exit_code,
        "reason": reason,
        "startedAt": started_at,
        "finishedAt": finished_at,
    }
    if message:
        state["message"] = message
    if container_id:
        state["containerID"] = container_id
    ready_reason = "PodCompleted" if phase == "Succeeded" else "PodFailed"
    conditions = set_condition(result.get("conditions"), "Ready", "False", ready_reason, "")
    conditions = set_condition(conditions, "ContainersReady", "False", ready_reason, "")
    conditions = set_condition(conditions, "PodReadyToStartContainers", "False", "", "")
    result.update(
        phase=phase,
        conditions=conditions,
        containerStatuses=_container_statuses(
            pod, {"terminated": state}, ready=False, container_id=container_id
        ),
    )
    if pod_reason:
        result["reason"] = pod_reason
        result["message"] = pod_message
    return result


def init_failed(
    status: dict[str, Any], name: str, *, exit_code: int, message: str, at: str
) -> dict[str, Any]:
    """The init container ``name`` ended with ``exit_code`` (reason Error, its output's tail as the
    message), as the kubelet reports it in ``initContainerStatuses``."""
    result = dict(status)
    statuses = []
    for entry in result.get("initContainerStatuses") or []:
        if entry.get("name") == name:
            state = {
                "exitCode": exit_code,
                "reason": "Error",
                "message": message,
                "startedAt": at,
                "finishedAt": at,
            }
            entry = {**entry, "state": {"terminated": state}}
        statuses.append(entry)
    result["initContainerStatuses"] = statuses
    return result
