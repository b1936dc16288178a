"""Names and label values for Iris pods (pure).

Pod names are rebuilt from ``(task_id, attempt_uid)`` whenever they are needed, so the
controller never stores them. Label values are sanitised copies of Iris ids; the exact ids
travel in annotations.
"""

from __future__ import annotations

import hashlib
import re

MAX_NAME_LENGTH = 63
HASH_LENGTH = 8

# Label and annotation keys the backend stamps on every pod it creates.
LABEL_MANAGED = "iris.managed"
LABEL_BACKEND_ID = "iris.backend_id"
LABEL_JOB_ID = "iris.job_id"
LABEL_TASK_ID = "iris.task_id"
LABEL_ATTEMPT_UID = "iris.attempt_uid"
ANNOTATION_JOB_ID = "iris.job_id"
ANNOTATION_TASK_ID = "iris.task_id"
ANNOTATION_ATTEMPT_UID = "iris.attempt_uid"
ANNOTATION_ATTEMPT_NUMBER = "iris.attempt_number"

TASK_CONTAINER = "task"

_NOT_DNS = re.compile(r"[^a-z0-9-]+")
_DASHES = re.compile(r"-{2,}")
_NOT_LABEL = re.compile(r"[^A-Za-z0-9._-]+")
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
_PLAIN = re.compile(r"^[a-z0-9]+$")
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


def short_hash(text: str, length: int = HASH_LENGTH) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:length]


def dns_fragment(text: str) -> str:
    """Lowercase ``text`` and squeeze everything outside ``[a-z0-9-]`` into single dashes."""
    return _DASHES.sub("-", _NOT_DNS.sub("-", text.lower())).strip("-")


def is_dns_label(name: str) -> bool:
    return len(name) <= MAX_NAME_LENGTH and bool(_DNS_LABEL.match(name))


def task_name(task_id: str) -> str:
    """``/alice/train/0`` -> ``alice-train-0`` (empty if nothing printable survives)."""
    return dns_fragment(task_id.replace("/", "-"))


def pod_name(task_id: str, attempt_uid: str, container_name: str = TASK_CONTAINER) -> str:
    """``{task_name}-{attempt_uid}-{container_name}`` as a DNS-1123 label of at most 63 chars.

    The attempt uid always survives (sanitised, never truncated), so two attempts never share
    a name. When the readable task prefix has to be shortened, or when the uid is not plain
    ``[a-z0-9]`` or the container name needed sanitising, a short hash of the full
    unsanitised triple is kept before the uid.
    """
    uid = dns_fragment(attempt_uid)
    container = dns_fragment(container_name)
    if not uid:
        raise ValueError(f"attempt uid {attempt_uid!r} has no character usable in a pod name")
    if not container:
        raise ValueError(f"container name {container_name!r} has no character usable in a pod name")
    prefix = task_name(task_id) or "task"
    # A uid of plain [a-z0-9] is always the second-to-last dash-separated token, so it alone
    # keeps names apart; anything else (dashes, capitals, symbols) also gets the hash.
    lossless = bool(_PLAIN.match(attempt_uid)) and container == container_name
    plain = f"{prefix}-{uid}-{container}"
    if lossless and len(plain) <= MAX_NAME_LENGTH:
        return plain
    digest = short_hash(f"{task_id}\0{attempt_uid}\0{container_name}")
    core = f"{digest}-{uid}"
    if len(core) > MAX_NAME_LENGTH - 2:
        raise ValueError(f"attempt uid {attempt_uid!r} is too long to fit in a pod name")
    room_for_container = MAX_NAME_LENGTH - len(core) - 1
    container = container[:room_for_container].rstrip("-") or container[0]
    tail = f"-{core}-{container}"
    room_for_prefix = MAX_NAME_LENGTH - len(tail)
    prefix = prefix[:room_for_prefix].rstrip("-")
    return f"{prefix}{tail}" if prefix else tail[1:]


def is_pod_of_attempt(name: str, attempt_uid: str, container_name: str = TASK_CONTAINER) -> bool:
    """Whether ``name`` is the pod :func:`pod_name` gives some task for ``attempt_uid`` (both
    forms end in ``-{uid}-{container}``, the uid never cut)."""
    uid = dns_fragment(attempt_uid)
    return bool(uid) and name.endswith(f"-{uid}-{dns_fragment(container_name)}")


def label_value(text: str) -> str:
    """A valid label value for an id: ``/alice/train`` -> ``alice.train``.

    Characters outside ``[A-Za-z0-9._-]`` become ``.``; a value too long keeps a hash of the
    original so two long ids do not collide. The exact id always goes in an annotation.
    """
    value = _NOT_LABEL.sub(".", text.replace("/", ".")).strip("._-")
    if len(value) <= MAX_NAME_LENGTH:
        return value
    digest = short_hash(text)
    head = value[: MAX_NAME_LENGTH - HASH_LENGTH - 1].rstrip("._-")
    return f"{head}-{digest}" if head else digest


def is_label_value(value: str) -> bool:
    return len(value) <= MAX_NAME_LENGTH and bool(_LABEL_VALUE.match(value))


def pod_group_name(job_id: str, attempt_number: int) -> str:
    """Kueue pod-group name for one generation of a gang.

    A gang is always retried as a unit, so its tasks move to the next attempt number in lock
    step; putting the number in the group name gives each generation a fresh Kueue Workload
    instead of reusing one that may still hold the previous generation's quota.
    """
    suffix = f"-{short_hash(job_id)}-g{attempt_number}"
    head = dns_fragment(job_id.replace("/", "-"))[: MAX_NAME_LENGTH - len(suffix)].rstrip("-")
    return f"{head}{suffix}" if head else f"iris{suffix}"
