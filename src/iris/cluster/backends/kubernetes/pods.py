"""The Pod manifest of one task attempt (pure).

One attempt is one Pod with ``restartPolicy: Never``: Kubernetes never restarts it, Iris
retries by creating a new attempt (a new pod name). Kueue sees the pod through its
``queue-name`` label, gates it, and admits it (alone, or with its gang) when quota allows.
"""

from __future__ import annotations

import base64
import re
from pathlib import Path
from typing import Any

from iris.cluster.backends.kubernetes.accelerators import accelerator_placement
from iris.cluster.backends.kubernetes.config import KubernetesBackendConfig
from iris.cluster.backends.kubernetes.environment import (
    ENV_STATE_DIR,
    ENV_STATE_VAR,
    environment_command,
    environment_init_container,
    environment_volumes,
    needs_environment,
    task_environment_mounts,
)
from iris.cluster.backends.kubernetes.gang import (
    GANG_DIR,
    GANG_VOLUME,
    gang_command,
    gang_init_container,
    gang_static_env,
    is_gang,
)
from iris.cluster.backends.kubernetes.naming import (
    ANNOTATION_ATTEMPT_NUMBER,
    ANNOTATION_ATTEMPT_UID,
    ANNOTATION_JOB_ID,
    ANNOTATION_TASK_ID,
    LABEL_ATTEMPT_UID,
    LABEL_BACKEND_ID,
    LABEL_JOB_ID,
    LABEL_MANAGED,
    LABEL_TASK_ID,
    TASK_CONTAINER,
    is_label_value,
    label_value,
    pod_group_name,
    pod_name,
)
from iris.cluster.runtime.attempt_env import task_contract_env
from iris.cluster.runtime.container import (
    RUNNER_DEPS_DIR,
    RUNNER_DEPS_ENV,
    RUNNER_DIR,
    runner_packages,
    worker_site_packages,
)
from iris.cluster.worker import safe_unpack as safe_unpack_module
from iris.rpc.enums import ConstraintOp
from iris.rpc.models import Constraint, RunSpec

KUEUE_QUEUE_NAME = "kueue.x-k8s.io/queue-name"
KUEUE_PRIORITY_CLASS = "kueue.x-k8s.io/priority-class"
KUEUE_POD_GROUP_NAME = "kueue.x-k8s.io/pod-group-name"
KUEUE_POD_GROUP_TOTAL_COUNT = "kueue.x-k8s.io/pod-group-total-count"
# Kueue keeps a pod group's Workload (and its quota, and the managed finalizer on every member)
# until all members succeed, waiting for replacements of failed ones. Iris never replaces a
# member in place: a failed gang comes back as a new generation with a new group name. Marking
# every member unretriable tells Kueue to finish the Workload once no member is still active.
KUEUE_RETRIABLE_IN_GROUP = "kueue.x-k8s.io/retriable-in-group"

CALLABLE_ENV = "IRIS_CALLABLE_B64"
# A pod is one etcd object (about 1.5 MiB at most, with everything else in it): a small pickle
# rides inline in an env var, a larger one is fetched from the controller when the task starts.
CALLABLE_INLINE_MAX = 64 * 1024
PREFERENCE_WEIGHT = 10  # every preferred term weighs the same (range 1-100)
# The callable runner reads its pickle from a file; this bootstrap writes it out first.
CALLABLE_BOOTSTRAP = """\
import base64, os, sys, tempfile, urllib.parse, urllib.request
from iris.cluster.worker.callable_runner import main
payload = os.environ.pop("IRIS_CALLABLE_B64", None)
if payload is not None:
    data = base64.b64decode(payload)
else:
    job = urllib.parse.quote(os.environ["IRIS_JOB_ID"].strip("/"))
    url = os.environ["IRIS_CONTROLLER_URL"].rstrip("/") + "/api/v1/jobs/" + job + ":callable"
    request = urllib.request.Request(url)
    if os.environ.get("IRIS_TOKEN"):
        request.add_header("Authorization", "Bearer " + os.environ["IRIS_TOKEN"])
    try:
        with urllib.request.urlopen(request, timeout=300) as resp:
            data = resp.read()
    except OSError as exc:
        sys.exit(f"could not fetch the job's callable from {url}: {exc}")
with tempfile.NamedTemporaryFile(suffix=".pkl", delete=False) as f:
    f.write(data)
sys.exit(main([f.name]))
"""

# The workspace bundle is unpacked by an init container into an emptyDir the task runs in.
WORKSPACE_VOLUME = "workspace"
WORKSPACE_DIR = "/workspace"
BUNDLE_INIT_CONTAINER = "fetch-bundle"
BUNDLE_TOKEN_ENV = "IRIS_BUNDLE_TOKEN"
# Fetch, check the sha256, unpack with the worker's own unpacker (its source is prepended, so the
# task image needs only Python's standard library, not Iris): files and directories only, no
# links or special files, never outside the work dir, bounded in bytes and entries.
_BUNDLE_FETCH = """
import hashlib, os, sys, urllib.request
bundle = os.environ["IRIS_BUNDLE_ID"]
url = os.environ["IRIS_CONTROLLER_URL"].rstrip("/") + "/api/v1/bundles/" + bundle
request = urllib.request.Request(url)
if os.environ.get("IRIS_BUNDLE_TOKEN"):
    request.add_header("Authorization", "Bearer " + os.environ["IRIS_BUNDLE_TOKEN"])
path, digest = "/tmp/iris-bundle.tar.gz", hashlib.sha256()
try:
    with urllib.request.urlopen(request, timeout=300) as resp, open(path, "wb") as out:
        for chunk in iter(lambda: resp.read(1 << 20), b""):
            digest.update(chunk)
            out.write(chunk)
except OSError as exc:
    sys.exit(f"could not fetch bundle {bundle} from {url}: {exc}")
if digest.hexdigest() != bundle:
    sys.exit(f"could not fetch bundle {bundle}: the downloaded bytes hash to {digest.hexdigest()}")
try:
    safe_unpack(Path(path), Path(os.environ["IRIS_WORKDIR"]))
except (UnsafeBundle, tarfile.TarError, OSError) as exc:
    sys.exit(f"could not unpack bundle {bundle}: {exc}")
print(f"unpacked bundle {bundle[:12]} into {os.environ['IRIS_WORKDIR']}")
"""
BUNDLE_INIT_SCRIPT = Path(safe_unpack_module.__file__).read_text() + _BUNDLE_FETCH
# Every container: no privilege escalation (setuid binaries), no Linux capabilities; the pod:
# the runtime's default seccomp profile (and a non-root uid when the config names one).
CONTAINER_SECURITY_CONTEXT: dict[str, Any] = {
    "allowPrivilegeEscalation": False,
    "privileged": False,
    "capabilities": {"drop": ["ALL"]},
}

_LABEL_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


class PodSpecError(ValueError):
    """The attempt cannot be expressed as a Pod; retrying the same spec cannot help."""


# The job's image_pull_policy as Kubernetes spells it.
PULL_POLICIES = {"if-not-present": "IfNotPresent", "always": "Always", "never": "Never"}


def build_pod(
    spec: RunSpec,
    config: KubernetesBackendConfig,
    *,
    controller_url: str,
    backend_id: str,
    bundle_token: str | None = None,
    secret_name: str | None = None,
) -> dict[str, Any]:
    """The Pod manifest (a plain dict, ready for JSON) for one attempt.

    ``bundle_token`` (a credential scoped to reading the bundle) goes to the init container only.
    With ``secret_name`` (the attempt's Secret, see :func:`attempt_secret`) the job token and the
    job's secrets are references to it (``valueFrom.secretKeyRef``), not values in the pod spec.
    """
    labels = {
        LABEL_MANAGED: "true",
        LABEL_BACKEND_ID: label_value(backend_id),
        LABEL_JOB_ID: label_value(spec.job_id),
        LABEL_TASK_ID: label_value(spec.task_id),
        LABEL_ATTEMPT_UID: label_value(spec.attempt_uid),
        KUEUE_QUEUE_NAME: config.local_queue,
    }
    annotations = {
        ANNOTATION_JOB_ID: spec.job_id,
        ANNOTATION_TASK_ID: spec.task_id,
        ANNOTATION_ATTEMPT_UID: spec.attempt_uid,
        ANNOTATION_ATTEMPT_NUMBER: str(spec.attempt_number),
    }
    pod_spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "enableServiceLinks": False,
        "securityContext": pod_security_context(config),
    }

    priority_class = config.priority_class(spec.priority)
    if priority_class:
        labels[KUEUE_PRIORITY_CLASS] = priority_class
        pod_spec["priorityClassName"] = priority_class
    gang_size = spec.gang_size or spec.replicas
    if spec.coscheduling is not None and gang_size > 1:
        generation = spec.gang_generation if spec.gang_generation is not None else spec.attempt_number
        labels[KUEUE_POD_GROUP_NAME] = pod_group_name(spec.job_id, generation)
        annotations[KUEUE_POD_GROUP_TOTAL_COUNT] = str(gang_size)
        annotations[KUEUE_RETRIABLE_IN_GROUP] = "false"
    if config.service_account:
        pod_spec["serviceAccountName"] = config.service_account
    else:  # the namespace's default account: a task has no use for its API token
        pod_spec["automountServiceAccountToken"] = False

    node_selector, match_expressions = node_placement(spec.constraints)
    device_selector, tolerations = accelerator_placement(spec, config)
    node_selector = {**device_selector, **node_selector}
    if node_selector:
        pod_spec["nodeSelector"] = node_selector
    if tolerations:
        pod_spec["tolerations"] = tolerations
    node_affinity: dict[str, Any] = {}
    if match_expressions:
        node_affinity["requiredDuringSchedulingIgnoredDuringExecution"] = {
            "nodeSelectorTerms": [{"matchExpressions": match_expressions}]
        }
    if spec.preferences:
        node_affinity["preferredDuringSchedulingIgnoredDuringExecution"] = preferred_terms(spec.preferences)
    if node_affinity:
        pod_spec["affinity"] = {"nodeAffinity": node_affinity}

    gang = is_gang(spec)
    command = container_command(spec)
    env = task_env(spec, controller_url)
    volumes: list[dict[str, Any]] = []
    inits: list[dict[str, Any]] = []
    mounts: list[dict[str, Any]] = []
    host_runner = spec.entrypoint.kind == "callable" and config.host_runner
    if host_runner:
        env = {**env, **host_runner_env(env)}
    if gang:  # ranks now, the coordinator's address from the rendezvous init container (gang.py)
        command = gang_command(command)
        env = {**gang_static_env(spec), **env}
    with_environment = needs_environment(spec)
    if with_environment:  # built (or found) on the node by an init container (environment.py)
        command = environment_command(spec, command)
        env = {**env, ENV_STATE_VAR: ENV_STATE_DIR}
    container: dict[str, Any] = {
        "name": TASK_CONTAINER,
        "image": spec.image or config.default_image,
        "command": [escape_expansion(arg) for arg in command],
        "env": env_entries(env, secret_name, secret_keys(spec)),
        "resources": container_resources(spec, config),
        **({"imagePullPolicy": PULL_POLICIES[spec.image_pull_policy]} if spec.image else {}),
        "terminationMessagePolicy": "FallbackToLogsOnError",
        "securityContext": dict(CONTAINER_SECURITY_CONTEXT),
    }
    if spec.bundle_id:
        mounts.append({"name": WORKSPACE_VOLUME, "mountPath": WORKSPACE_DIR})
        container["workingDir"] = WORKSPACE_DIR
        volumes.append({"name": WORKSPACE_VOLUME, "emptyDir": {}})
        inits.append(bundle_init_container(spec, config, controller_url, bundle_token, secret_name))
    if with_environment:
        workspace_mount = mounts[0] if spec.bundle_id else None
        resources = {
            section: {k: v for k, v in values.items() if k in ("cpu", "memory", "ephemeral-storage")}
            for section, values in container["resources"].items()
        }
        inits.append(
            environment_init_container(
                spec,
                config,
                image=container["image"],
                workdir=WORKSPACE_DIR if spec.bundle_id else None,
                workspace_mount=workspace_mount,
                resources={k: v for k, v in resources.items() if v},
                security_context=dict(CONTAINER_SECURITY_CONTEXT),
                pull_policy=container.get("imagePullPolicy"),
            )
        )
        mounts += task_environment_mounts()
        volumes += environment_volumes(config, spec.user)
    if gang:
        mounts.append({"name": GANG_VOLUME, "mountPath": GANG_DIR})
        volumes.append({"name": GANG_VOLUME, "emptyDir": {}})
        rendezvous = gang_init_container(spec, config.default_image, controller_url)
        rendezvous["env"] += token_entries(spec, secret_name, TOKEN_ENV)
        rendezvous["securityContext"] = dict(CONTAINER_SECURITY_CONTEXT)
        inits.append(rendezvous)
    if host_runner:
        host_runner_volumes(volumes, mounts)
    if mounts:
        container["volumeMounts"] = mounts
        pod_spec["volumes"] = volumes
    if inits:
        pod_spec["initContainers"] = inits
    pod_spec["containers"] = [container]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": pod_name(spec.task_id, spec.attempt_uid),
            "namespace": config.namespace,
            "labels": labels,
            "annotations": annotations,
        },
        "spec": pod_spec,
    }


def host_runner_env(env: dict[str, str]) -> dict[str, str]:
    """``host_runner``: the runner's packages first on the path, the site-packages last."""
    before = env.get("PYTHONPATH")
    fallback = [f"{RUNNER_DEPS_DIR}/{n}" for n in range(len(worker_site_packages()))]
    return {
        "PYTHONPATH": f"{RUNNER_DIR}:{before}" if before else RUNNER_DIR,
        RUNNER_DEPS_ENV: ":".join(fallback),
        "PYTHONDONTWRITEBYTECODE": "1",
    }


def host_runner_volumes(volumes: list[dict[str, Any]], mounts: list[dict[str, Any]]) -> None:
    """``host_runner``: the controller's ``iris`` and ``cloudpickle`` and its site-packages as
    read-only hostPath volumes (the node is the controller's machine), where the container runtime
    of the worker backend mounts them."""
    places = [(f"{RUNNER_DIR}/{name}", path) for name, path in runner_packages().items()]
    places += [(f"{RUNNER_DEPS_DIR}/{n}", path) for n, path in enumerate(worker_site_packages())]
    for number, (inside, path) in enumerate(places):
        name = f"iris-runner-{number}"
        volumes.append({"name": name, "hostPath": {"path": path, "type": "Directory"}})
        mounts.append({"name": name, "mountPath": inside, "readOnly": True})


def bundle_init_container(
    spec: RunSpec,
    config: KubernetesBackendConfig,
    controller_url: str,
    token: str | None,
    secret_name: str | None = None,
) -> dict[str, Any]:
    """Fetches ``spec.bundle_id`` from the controller, checks its sha256 and unpacks it into the
    shared workspace volume before the task container starts."""
    assert spec.bundle_id is not None
    env = {
        "IRIS_BUNDLE_ID": spec.bundle_id,
        "IRIS_CONTROLLER_URL": controller_url,
        "IRIS_WORKDIR": WORKSPACE_DIR,
    }
    entries = env_entries(env, None, set())
    if token and secret_name and TOKEN_ENV in secret_keys(spec):
        ref = {"name": secret_name, "key": TOKEN_ENV}
        entries.append({"name": BUNDLE_TOKEN_ENV, "valueFrom": {"secretKeyRef": ref}})
    elif token:
        entries.append({"name": BUNDLE_TOKEN_ENV, "value": escape_expansion(token)})
    return {
        "name": BUNDLE_INIT_CONTAINER,
        "image": config.default_image,
        "command": ["python3", "-c", escape_expansion(BUNDLE_INIT_SCRIPT)],
        "env": entries,
        "volumeMounts": [{"name": WORKSPACE_VOLUME, "mountPath": WORKSPACE_DIR}],
        "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}, "limits": {"memory": "512Mi"}},
        "terminationMessagePolicy": "FallbackToLogsOnError",
        "securityContext": dict(CONTAINER_SECURITY_CONTEXT),
    }


def token_entries(spec: RunSpec, secret_name: str | None, name: str) -> list[dict[str, Any]]:
    """The job token as ``name`` for an init container that calls the controller: a reference
    into the attempt's Secret, or the value when the pod has no Secret; none without a token."""
    if TOKEN_ENV not in spec.env:
        return []
    if secret_name:
        return [{"name": name, "valueFrom": {"secretKeyRef": {"name": secret_name, "key": TOKEN_ENV}}}]
    return [{"name": name, "value": escape_expansion(spec.env[TOKEN_ENV])}]


def pod_security_context(config: KubernetesBackendConfig) -> dict[str, Any]:
    """The runtime's default seccomp profile always; with ``run_as_user`` every container runs as
    that uid (and gid), ``runAsNonRoot`` enforced, and the workspace volume group-owned by it."""
    context: dict[str, Any] = {"seccompProfile": {"type": "RuntimeDefault"}}
    if config.run_as_user is not None:
        uid = config.run_as_user
        context.update(runAsNonRoot=True, runAsUser=uid, runAsGroup=uid, fsGroup=uid)
    return context


TOKEN_ENV = "IRIS_TOKEN"


def secret_keys(spec: RunSpec) -> set[str]:
    """The task variables that are credentials: its job token and the job's secrets."""
    keys = set(spec.secret_env)
    if TOKEN_ENV in spec.env:
        keys.add(TOKEN_ENV)
    return keys


def secret_name_of(pod: str) -> str:
    """The attempt's Secret, named after its pod (a DNS subdomain; pod names are at most 63)."""
    return f"{pod}-env"


def attempt_secret(
    spec: RunSpec, config: KubernetesBackendConfig, controller_url: str
) -> dict[str, Any] | None:
    """The attempt's own Secret (job token, job secrets), or None when it has no credential. The
    backend creates it before the pod and then makes the pod its owner, so it is deleted with it."""
    env = task_env(spec, controller_url)
    data = {k: env[k] for k in sorted(secret_keys(spec)) if k in env}
    if not data:
        return None
    pod = pod_name(spec.task_id, spec.attempt_uid)
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "Opaque",
        "metadata": {
            "name": secret_name_of(pod),
            "namespace": config.namespace,
            "labels": {LABEL_MANAGED: "true", LABEL_ATTEMPT_UID: label_value(spec.attempt_uid)},
        },
        "data": {k: base64.b64encode(v.encode("utf-8", "surrogateescape")).decode() for k, v in data.items()},
    }


def env_entries(env: dict[str, str], secret_name: str | None, secret: set[str]) -> list[dict[str, Any]]:
    """Container env: plain values (``$`` escaped), or references into the attempt's Secret."""
    out: list[dict[str, Any]] = []
    for k, v in env.items():
        if secret_name and k in secret:
            out.append({"name": k, "valueFrom": {"secretKeyRef": {"name": secret_name, "key": k}}})
        else:
            out.append({"name": k, "value": escape_expansion(v)})
    return out


def escape_expansion(text: str) -> str:
    """Kubernetes rewrites ``$(VAR)`` and ``$$`` in a container's command and env values;
    doubling every ``$`` makes it hand the task exactly the text Iris was given, as a worker
    daemon would."""
    return text.replace("$", "$$")


def task_env(spec: RunSpec, controller_url: str) -> dict[str, str]:
    """Job env, then the environment's variables, then the IRIS_* contract (which a job cannot
    override): the same layering as the worker daemon's."""
    env: dict[str, str] = dict(spec.env)
    if spec.environment is not None:
        env.update(spec.environment.env_vars)
    env.update(spec.secret_env)  # the job's secrets: secretKeyRef entries into the attempt's Secret
    env.update(task_contract_env(spec, controller_url))  # the same contract as on worker daemons
    payload = spec.entrypoint.callable_b64 or ""
    if spec.entrypoint.kind == "callable" and len(payload) <= CALLABLE_INLINE_MAX:
        env[CALLABLE_ENV] = payload
    if spec.bundle_id:
        env["IRIS_BUNDLE_ID"] = spec.bundle_id
    if spec.user:
        env["IRIS_USER"] = spec.user
    return env


def container_command(spec: RunSpec) -> list[str]:
    entrypoint = spec.entrypoint
    if entrypoint.kind == "callable":
        argv = ["python3", "-c", CALLABLE_BOOTSTRAP]
    else:
        argv = list(entrypoint.argv)
    return argv  # the job's --pip packages and project environment: see environment.py


def container_resources(spec: RunSpec, config: KubernetesBackendConfig) -> dict[str, dict[str, str]]:
    """Requests and limits. CPU is a request only (burstable, shares by weight); memory and
    disk are hard caps (request = limit); devices are counted in both, as Kubernetes requires."""
    res = spec.resources
    requests: dict[str, str] = {}
    limits: dict[str, str] = {}
    if res.cpu_millicores > 0:
        requests["cpu"] = f"{res.cpu_millicores}m"
    if res.memory_bytes > 0:
        requests["memory"] = limits["memory"] = str(res.memory_bytes)
    if res.disk_bytes > 0:
        requests["ephemeral-storage"] = limits["ephemeral-storage"] = str(res.disk_bytes)
    device = res.device
    if device is not None and device.count > 0:
        resource_name = config.device_resources.get(device.type.lower())
        if resource_name is None:
            known = ", ".join(sorted(config.device_resources)) or "none"
            raise PodSpecError(
                f"device type {device.type!r} has no Kubernetes resource name (known: {known})"
            )
        requests[resource_name] = limits[resource_name] = str(device.count)
    out: dict[str, dict[str, str]] = {}
    if requests:
        out["requests"] = requests
    if limits:
        out["limits"] = limits
    return out


def node_placement(constraints: list[Constraint]) -> tuple[dict[str, str], list[dict[str, Any]]]:
    """EQ constraints become a nodeSelector; the other operators become required node
    affinity expressions (all ANDed, like Iris constraints)."""
    selector: dict[str, str] = {}
    expressions: list[dict[str, Any]] = []
    for c in constraints:
        check_label_key(c.key)
        if c.op is ConstraintOp.EQ:
            selector[c.key] = _value(c, c.value)
        elif c.op is ConstraintOp.NE:
            expressions.append({"key": c.key, "operator": "NotIn", "values": [_value(c, c.value)]})
        elif c.op is ConstraintOp.IN:
            expressions.append({"key": c.key, "operator": "In", "values": [_value(c, v) for v in c.values]})
        elif c.op is ConstraintOp.EXISTS:
            expressions.append({"key": c.key, "operator": "Exists"})
        elif c.op is ConstraintOp.NOT_EXISTS:
            expressions.append({"key": c.key, "operator": "DoesNotExist"})
        else:
            # Kubernetes compares node labels as integers, with strict Gt/Lt only.
            number = _integer(c)
            if c.op is ConstraintOp.GT:
                expressions.append({"key": c.key, "operator": "Gt", "values": [str(number)]})
            elif c.op is ConstraintOp.GE:
                expressions.append({"key": c.key, "operator": "Gt", "values": [str(number - 1)]})
            elif c.op is ConstraintOp.LT:
                expressions.append({"key": c.key, "operator": "Lt", "values": [str(number)]})
            else:
                expressions.append({"key": c.key, "operator": "Lt", "values": [str(number + 1)]})
    return selector, expressions


def preferred_terms(preferences: list[Constraint]) -> list[dict[str, Any]]:
    """Soft constraints as preferred node affinity, one equally weighted term each: the scheduler
    ranks nodes by how many they meet, as the Iris scheduler ranks workers (never a requirement)."""
    terms = []
    for preference in preferences:
        selector, expressions = node_placement([preference])
        expressions += [{"key": k, "operator": "In", "values": [v]} for k, v in selector.items()]
        terms.append({"weight": PREFERENCE_WEIGHT, "preference": {"matchExpressions": expressions}})
    return terms


def check_label_key(key: str) -> None:
    prefix, _, name = key.rpartition("/")
    ok = bool(_LABEL_NAME.match(name)) and len(name) <= 63
    if prefix:
        ok = ok and len(prefix) <= 253 and bool(_DNS_SUBDOMAIN.match(prefix))
    if not ok:
        raise PodSpecError(f"constraint key {key!r} is not a valid Kubernetes node label key")


def _value(c: Constraint, value: str | None) -> str:
    if value is None or not is_label_value(value):
        raise PodSpecError(f"constraint {c.describe()}: {value!r} is not a valid Kubernetes label value")
    return value


def _integer(c: Constraint) -> int:
    try:
        number = float(c.value or "")
    except ValueError:
        number = float("nan")
    if not number.is_integer():
        raise PodSpecError(f"constraint {c.describe()}: Kubernetes compares node labels as integers only")
    return int(number)
