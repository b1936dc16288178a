"""Distributed-training variables for a gang of pods (pure manifest pieces).

A gang's pods are created together, before any is scheduled, so task 0's address is not known
when their env is written. Ranks, size and the coordinator port are (they go in the env as plain
values). The address is found at start by an init container, ``gang-rendezvous``: in task 0 it
publishes its own pod IP (downward API ``status.podIP``) and the port as the job's coordinator
endpoint at the Iris controller (the endpoint ``iris.client.distributed()`` uses); in the others
it waits for that endpoint (of the same gang generation). It writes the address into a file on
an emptyDir volume, which the task's command sources (``sh -c '. FILE && exec "$@"'``) before it
replaces itself by the task. Nothing here needs cluster DNS, a Service or an API token for the
pod: only the controller URL every task already reaches.
"""

from __future__ import annotations

from typing import Any

from iris.cluster.runtime.attempt_env import gang_rank_env
from iris.rpc.gang import coordinator_endpoint_name, gang_port
from iris.rpc.models import RunSpec

GANG_VOLUME = "iris-gang"
GANG_DIR = "/iris-gang"
GANG_ENV_FILE = f"{GANG_DIR}/env.sh"
GANG_ENV_VAR = "IRIS_GANG_ENV"
GANG_INIT_CONTAINER = "gang-rendezvous"
GANG_WAIT_S = 600
# Sources the file the rendezvous wrote, then becomes the task ("$@"); a variable the job set
# itself (MASTER_ADDR, ...) is kept.
GANG_WRAPPER = '. "$IRIS_GANG_ENV" && exec "$@"'

# Standard library only: the init container runs the cluster's default image, not the task's.
GANG_RENDEZVOUS = """\
import json, os, re, sys, time, urllib.parse, urllib.request
env = os.environ
base = env["IRIS_CONTROLLER_URL"].rstrip("/")
job, name, generation = env["IRIS_JOB_ID"], env["IRIS_GANG_ENDPOINT"], env["IRIS_GANG_GENERATION"]
headers = {"Content-Type": "application/json"}
if env.get("IRIS_TOKEN"):
    headers["Authorization"] = "Bearer " + env["IRIS_TOKEN"]

def call(method, path, body=None):
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(base + path, data=data, headers=headers, method=method)
    with urllib.request.urlopen(request, timeout=30) as resp:
        return json.load(resp)

if env["IRIS_TASK_INDEX"] == "0":
    address = env["IRIS_POD_IP"] + ":" + env["MASTER_PORT"]
    registration = {
        "name": name, "address": address, "job_id": job, "task_id": env["IRIS_TASK_ID"],
        "metadata": {"generation": generation, "attempt_uid": env["IRIS_ATTEMPT_UID"],
                     "num_processes": env["WORLD_SIZE"]},
    }
    try:
        call("POST", "/api/v1/endpoints", registration)
    except OSError as exc:
        sys.exit(f"could not publish the gang coordinator {address} at {base}: {exc}")
else:
    query = urllib.parse.urlencode({"job": job.lstrip("/"), "name": name})
    deadline = time.monotonic() + float(env.get("IRIS_GANG_WAIT_S", "600"))
    address, error = None, None
    while address is None:
        try:
            for e in call("GET", "/api/v1/endpoints?" + query)["endpoints"]:
                if e["job_id"] == job and (e.get("metadata") or {}).get("generation") == generation:
                    address = e["address"]
        except (OSError, ValueError, KeyError) as exc:
            error = exc
        if address is None:
            if time.monotonic() > deadline:
                sys.exit(f"task 0 of {job} published no coordinator (gang generation {generation})"
                         + (f"; last error: {error}" if error else ""))
            time.sleep(0.5)
if not re.fullmatch(r"[A-Za-z0-9.\\-\\[\\]:]+:[0-9]+", address):
    sys.exit(f"the gang coordinator address {address!r} is not host:port")
host = address.rpartition(":")[0]
with open(env["IRIS_GANG_ENV"], "w") as f:
    for key, value in (("IRIS_COORDINATOR_ADDRESS", address), ("JAX_COORDINATOR_ADDRESS", address),
                       ("MASTER_ADDR", host)):
        f.write(f'export {key}="${{{key}:-{value}}}"\\n')
print(f"gang generation {generation}: coordinator {address}")
"""


def is_gang(spec: RunSpec) -> bool:
    return spec.coscheduling is not None and (spec.gang_size or spec.replicas) > 1


def gang_generation(spec: RunSpec) -> int:
    return spec.gang_generation if spec.gang_generation is not None else spec.attempt_number


def gang_static_env(spec: RunSpec) -> dict[str, str]:
    """What every member knows before it is scheduled: its rank, the size, the port, the file."""
    size = spec.gang_size or spec.replicas
    port = gang_port(spec.job_id, gang_generation(spec))
    return {**gang_rank_env(spec.task_index, size, port), GANG_ENV_VAR: GANG_ENV_FILE}


def gang_init_container(spec: RunSpec, image: str, controller_url: str) -> dict[str, Any]:
    """The rendezvous (see the module doc); its env entries other than the pod IP are plain
    values, the caller adds the job token (a Secret reference) when the task has one."""
    env = {
        "IRIS_CONTROLLER_URL": controller_url,
        "IRIS_JOB_ID": spec.job_id,
        "IRIS_TASK_ID": spec.task_id,
        "IRIS_TASK_INDEX": str(spec.task_index),
        "IRIS_ATTEMPT_UID": spec.attempt_uid,
        "IRIS_GANG_GENERATION": str(gang_generation(spec)),
        "IRIS_GANG_ENDPOINT": coordinator_endpoint_name(spec.job_id),
        "IRIS_GANG_WAIT_S": str(GANG_WAIT_S),
        **gang_static_env(spec),
    }
    entries: list[dict[str, Any]] = [{"name": k, "value": v.replace("$", "$$")} for k, v in env.items()]
    entries.append({"name": "IRIS_POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}})
    return {
        "name": GANG_INIT_CONTAINER,
        "image": image,
        "command": ["python3", "-c", GANG_RENDEZVOUS.replace("$", "$$")],
        "env": entries,
        "volumeMounts": [{"name": GANG_VOLUME, "mountPath": GANG_DIR}],
        "resources": {"requests": {"cpu": "50m", "memory": "64Mi"}, "limits": {"memory": "256Mi"}},
        "terminationMessagePolicy": "FallbackToLogsOnError",
    }


def gang_command(argv: list[str]) -> list[str]:
    """The task's command behind the wrapper that sources the rendezvous' file."""
    return ["sh", "-c", GANG_WRAPPER, "iris-gang", *argv]
