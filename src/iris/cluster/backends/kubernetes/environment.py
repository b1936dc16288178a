"""The job's environment in a pod (pure manifest pieces): its ``--pip`` packages and its project
environment (``uv sync --frozen`` of the workspace's ``pyproject.toml`` + ``uv.lock``).

An init container, ``build-env``, runs in the task's own image (its ``python3``) after the bundle
is unpacked. It keys the environment as a worker does (requirements, lock and pyproject hashes,
extras, and the image's Python) and looks for it in a per-node cache: a hostPath volume
(``kubernetes.environment_dir``): only the job's user's own part of it,
``<environment_dir>/users/<user>`` (:func:`user_directory`), is mounted, at ``/iris-envs``, so one
user's pods can neither read nor plant code in another user's environments or uv cache. Within it
keys are as on a worker. A finished environment is reused
("reusing environment ..."); otherwise the pod takes a lock file beside it (``flock``: pods on one
node build it once, the others wait and reuse it), builds it with ``uv`` (from the image, or the
node's binary named by ``kubernetes.environment_uv``, mounted read-only) and marks it ready.
``kubernetes.environment_offline`` builds from the user's uv cache on the node only
(``<environment_dir>/users/<user>/.uv-cache``), into which a build first copies what it lacks of
the operator's pre-warmed ``<environment_dir>/.uv-cache`` (mounted read-only into ``build-env``
only, at ``/iris-uv-seed``; copied, never hard-linked, so no user can change it for the others).

The task container mounts the user's directory read-only and its command is wrapped: it prints the build's
log (so the attempt's log says what happened), puts the environment's ``bin`` first on ``PATH``
and becomes the task. A build that fails ends the init container with ``environment: ...`` (uv's
own error lines) as its last line, which the pod status mapping turns into failure kind
``environment``.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import posixpath
import re
from typing import Any

from iris.cluster.backends.kubernetes.config import KubernetesBackendConfig
from iris.cluster.worker.environments import (
    PARENT_SITE_PTH,
    PROJECT_PTH,
    PROJECT_PTH_LINE,
    READY_MARKER,
    normalized_requirements,
    uv_error,
)
from iris.rpc.models import ENVIRONMENT_ERROR_PREFIX, RunSpec

ENV_INIT_CONTAINER = "build-env"
ENV_CACHE_VOLUME = "iris-envs"
ENV_CACHE_DIR = "/iris-envs"
ENV_STATE_VOLUME = "iris-env"
ENV_STATE_DIR = "/iris-env"
ENV_UV_VOLUME = "iris-uv"
ENV_UV = "/opt/iris-uv/uv"
ENV_SEED_VOLUME = "iris-uv-seed"
ENV_SEED_DIR = "/iris-uv-seed"
ENV_STATE_VAR = "IRIS_ENV_STATE"
# Prints the build's log, enters the environment, becomes the task ("$@").
ENV_WRAPPER = (
    'cat "$IRIS_ENV_STATE/log" 2>/dev/null; d=$(cat "$IRIS_ENV_STATE/path") || exit 1; '
    'export VIRTUAL_ENV="$d" PATH="$d/bin:$PATH"; exec "$@"'
)
# With a project: its own package from this attempt's workspace (see environments.PROJECT_PTH).
ENV_PROJECT_WRAPPER = 'export IRIS_PROJECT_PATH="$PWD/src:$PWD"; ' + ENV_WRAPPER

_BUILD = """
import fcntl, hashlib, json, os, shutil, site, subprocess, sys, time
env = os.environ
root, state = env["IRIS_ENV_ROOT"], env["IRIS_ENV_STATE"]
requirements = json.loads(env.get("IRIS_ENV_REQUIREMENTS") or "[]")
extras = json.loads(env.get("IRIS_ENV_EXTRAS") or "[]")
log_file = open(os.path.join(state, "log"), "a")


def log(line):
    print(line, flush=True)
    log_file.write(line + "\\n")
    log_file.flush()


def fail(message):
    log(ERROR_PREFIX + message)  # the last line: the pod's termination message
    sys.exit(1)


project = None
if env.get("IRIS_ENV_PROJECT") == "1":
    workdir = env.get("IRIS_WORKDIR", "")
    names = ("pyproject.toml", "uv.lock")
    missing = [n for n in names if not workdir or not os.path.isfile(os.path.join(workdir, n))]
    if missing:
        fail("the job asks for its project environment but its workspace has no " + " or ".join(missing)
             + " (run `uv lock` in the directory you submit from, or submit with --no-sync)")
    project = {n: open(os.path.join(workdir, n), "rb").read() for n in names}
sites = list(site.getsitepackages()) + ([site.getusersitepackages()] if site.ENABLE_USER_SITE else [])
sites = [d for d in sites if os.path.isdir(d)]
fields = {
    "requirements": requirements,
    "python": json.dumps({"version": sys.version, "executable": sys.executable, "site": sites}),
}
if project is not None:
    fields["project"] = {
        "lock": hashlib.sha256(project["uv.lock"]).hexdigest(),
        "pyproject": hashlib.sha256(project["pyproject.toml"]).hexdigest(),
        "extras": extras,
        "project_pth": 1,
    }
key = hashlib.sha256(json.dumps(fields).encode()).hexdigest()[:16]
path = os.path.join(root, key)
node = env.get("IRIS_NODE_NAME") or "this node"


def finish(reused):
    with open(os.path.join(state, "path"), "w") as f:
        f.write(path)
    sys.exit(0)


if os.path.exists(os.path.join(path, READY_MARKER)):
    log(f"reusing environment {key} on {node}")
    finish(True)
uv = [env["IRIS_ENV_UV"]] if env.get("IRIS_ENV_UV") else None
if uv is None and shutil.which("uv"):
    uv = [shutil.which("uv")]
if uv is None:
    import importlib.util
    if importlib.util.find_spec("uv") is not None:
        uv = [sys.executable, "-m", "uv"]
if uv is None or not os.path.exists(uv[0]):
    fail("cannot build the job's environment: uv is not in the image " + sys.executable + " runs in "
         "(install uv there, or set kubernetes.environment_uv to the nodes' uv binary)")
try:
    os.makedirs(root, exist_ok=True)
    lock = open(os.path.join(root, "." + key + ".lock"), "a")
except OSError as exc:
    fail(f"cannot write the node's environment directory {root} "
         f"(<kubernetes.environment_dir>/users/{env.get('IRIS_ENV_USER_DIR', '?')}, the job's user's): "
         f"{exc.strerror or exc}; it must be writable by the pods' uid")
fcntl.flock(lock, fcntl.LOCK_EX)  # pods of this node build an environment once; the others wait
if os.path.exists(os.path.join(path, READY_MARKER)):
    log(f"reusing environment {key} on {node} (built meanwhile by another pod)")
    finish(True)
scratch = os.path.join(state, "build")
tmp = os.path.join(scratch, "tmp")
os.makedirs(tmp, exist_ok=True)
uv_env = {k: v for k, v in env.items() if not k.startswith("IRIS_")}
uv_env.update(UV_CACHE_DIR=os.path.join(root, ".uv-cache"), UV_PYTHON_DOWNLOADS="never", TMPDIR=tmp)
uv_env.setdefault("HOME", scratch)
if env.get("IRIS_ENV_OFFLINE") == "1":
    uv_env["UV_OFFLINE"] = "1"


# Copies what the user's uv cache lacks from the operator's read-only seed cache (copies, never
# hard links: a link would let this user write the seed's files, which the others' copies read).
def seed_cache(seed, cache):
    for top, dirs, files in os.walk(seed):
        target = os.path.normpath(os.path.join(cache, os.path.relpath(top, seed)))
        os.makedirs(target, exist_ok=True)
        for name in [*dirs, *files]:
            src, dst = os.path.join(top, name), os.path.join(target, name)
            if os.path.lexists(dst):
                continue
            if os.path.islink(src):  # uv's cache links are relative, within the cache
                try:
                    os.symlink(os.readlink(src), dst)
                except FileExistsError:
                    pass
            elif name in files and os.path.isfile(src):
                part = f"{dst}.{os.getpid()}.iris-part"
                shutil.copy2(src, part)
                os.replace(part, dst)


seed = env.get("IRIS_ENV_SEED")
if seed and os.path.isdir(seed):
    try:
        seed_cache(seed, uv_env["UV_CACHE_DIR"])
    except OSError as exc:
        fail(f"cannot copy the node's pre-warmed uv cache (<kubernetes.environment_dir>/.uv-cache) into "
             f"the user's: {exc}")
where = " offline" if env.get("IRIS_ENV_OFFLINE") == "1" else ""


def run(argv, what, extra_env=None):
    proc = subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          env={**uv_env, **(extra_env or {})}, cwd=scratch)
    lines = proc.stdout.decode("utf-8", "replace").splitlines()
    for line in lines[-200:]:
        log("uv: " + line)
    if proc.returncode != 0:
        fail(f"{what} failed (uv exited with code {proc.returncode}): {uv_error(lines)}")


parts = []
if project is not None:
    digest = hashlib.sha256(project["uv.lock"]).hexdigest()[:12]
    parts.append("uv sync --frozen" + "".join(" --extra " + e for e in extras) + f" (uv.lock {digest})")
if requirements or not parts:
    parts.append(" ".join(requirements))
log(f"building environment {key} on {node}{where}: {' + '.join(parts)}")
started = time.monotonic()
shutil.rmtree(path, ignore_errors=True)  # a failed or interrupted earlier build
run([*uv, "venv", "--no-config", "--quiet", "--allow-existing", "--python", sys.executable, path],
    "creating the environment")
python = os.path.join(path, "bin", "python")
if project is not None:
    directory = os.path.join(scratch, "project")
    os.makedirs(directory, exist_ok=True)
    for name, data in project.items():
        with open(os.path.join(directory, name), "wb") as f:
            f.write(data)
    argv = [*uv, "sync", "--frozen", "--no-install-project", "--no-config", "--python", python,
            "--project", directory]
    for extra in extras:
        argv += ["--extra", extra]
    run(argv, parts[0], {"UV_PROJECT_ENVIRONMENT": path})
if requirements:
    run([*uv, "pip", "install", "--no-config", "--python", python, "--", *requirements],
        "installing " + " ".join(requirements))
lib = os.path.join(path, "lib")
for version in os.listdir(lib):
    site_packages = os.path.join(lib, version, "site-packages")
    if not os.path.isdir(site_packages):
        continue
    # The image's own packages (Iris and the callable runner among them) after the environment's.
    with open(os.path.join(site_packages, PARENT_SITE_PTH), "w") as f:
        f.write("".join(f"import site; site.addsitedir({d!r})\\n" for d in sites))
    if project is not None:
        with open(os.path.join(site_packages, PROJECT_PTH), "w") as f:
            f.write(PROJECT_PTH_LINE)
with open(os.path.join(path, READY_MARKER), "w") as f:
    json.dump({"requirements": requirements, "built_at": time.time()}, f)
log(f"built environment {key} in {time.monotonic() - started:.1f}s")
finish(False)
"""
# Standard library only (it runs in the task's image); uv_error is the worker's own function.
BUILD_SCRIPT = (
    "from __future__ import annotations\n"
    f"READY_MARKER = {READY_MARKER!r}\n"
    f"PARENT_SITE_PTH = {PARENT_SITE_PTH!r}\n"
    f"PROJECT_PTH = {PROJECT_PTH!r}\n"
    f"PROJECT_PTH_LINE = {PROJECT_PTH_LINE!r}\n"
    f"ERROR_PREFIX = {ENVIRONMENT_ERROR_PREFIX!r}\n"
    "Sequence = list\n" + inspect.getsource(uv_error) + _BUILD
)


def needs_environment(spec: RunSpec) -> bool:
    environment = spec.environment
    return environment is not None and bool(environment.pip_packages or environment.project)


def environment_command(spec: RunSpec, argv: list[str]) -> list[str]:
    """The task's command inside its built environment."""
    assert spec.environment is not None
    wrapper = ENV_PROJECT_WRAPPER if spec.environment.project else ENV_WRAPPER
    return ["sh", "-c", wrapper, "iris-env", *argv]


_SAFE_USER = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")


def user_directory(user: str) -> str:
    """The name of a user's directory under ``<environment_dir>/users``: the user name itself when
    it is a plain one (a letter or digit, then letters, digits, ``.``, ``_``, ``-``), else ``_``
    and a hash of it (no plain name starts with ``_``, so two users never share a directory)."""
    if _SAFE_USER.fullmatch(user):
        return user
    return "_" + hashlib.sha256(user.encode()).hexdigest()[:32]


def user_environment_dir(config: KubernetesBackendConfig, user: str) -> str:
    """The node directory holding ``user``'s environments and uv cache (the pod's only view)."""
    return posixpath.join(config.environment_dir, "users", user_directory(user))


def environment_volumes(config: KubernetesBackendConfig, user: str) -> list[dict[str, Any]]:
    """The pod's volumes: its user's own environment directory only (never the whole
    ``environment_dir``, which holds every user's), the build's state, the node's uv."""
    path = user_environment_dir(config, user)
    volumes: list[dict[str, Any]] = [
        {"name": ENV_CACHE_VOLUME, "hostPath": {"path": path, "type": "DirectoryOrCreate"}},
        {"name": ENV_STATE_VOLUME, "emptyDir": {}},
    ]
    if config.environment_uv:
        volumes.append({"name": ENV_UV_VOLUME, "hostPath": {"path": config.environment_uv, "type": "File"}})
    if config.environment_offline:  # the operator's pre-warmed cache: read-only, build-env only
        seed = posixpath.join(config.environment_dir, ".uv-cache")
        volumes.append({"name": ENV_SEED_VOLUME, "hostPath": {"path": seed, "type": "DirectoryOrCreate"}})
    return volumes


def task_environment_mounts() -> list[dict[str, Any]]:
    """The task container's view: its user's environments read-only, the build's result."""
    return [
        {"name": ENV_CACHE_VOLUME, "mountPath": ENV_CACHE_DIR, "readOnly": True},
        {"name": ENV_STATE_VOLUME, "mountPath": ENV_STATE_DIR, "readOnly": True},
    ]


def environment_init_container(
    spec: RunSpec,
    config: KubernetesBackendConfig,
    *,
    image: str,
    workdir: str | None,
    workspace_mount: dict[str, Any] | None,
    resources: dict[str, dict[str, str]],
    security_context: dict[str, Any],
    pull_policy: str | None,
) -> dict[str, Any]:
    """Builds (or finds) the attempt's environment on its node, in the task's image."""
    environment = spec.environment
    assert environment is not None
    env: dict[str, str] = {
        **config.environment_build_env,
        "IRIS_ENV_ROOT": ENV_CACHE_DIR,
        "IRIS_ENV_USER_DIR": user_directory(spec.user),
        ENV_STATE_VAR: ENV_STATE_DIR,
        "IRIS_ENV_REQUIREMENTS": json.dumps(list(normalized_requirements(environment.pip_packages))),
        "IRIS_ENV_EXTRAS": json.dumps(sorted(set(environment.extras))),
        "IRIS_ENV_PROJECT": "1" if environment.project else "0",
        "IRIS_ENV_OFFLINE": "1" if config.environment_offline else "0",
        "PYTHONUNBUFFERED": "1",
    }
    if workdir:
        env["IRIS_WORKDIR"] = workdir
    mounts: list[dict[str, Any]] = [
        {"name": ENV_CACHE_VOLUME, "mountPath": ENV_CACHE_DIR},
        {"name": ENV_STATE_VOLUME, "mountPath": ENV_STATE_DIR},
    ]
    if workspace_mount is not None:
        mounts.append({**workspace_mount, "readOnly": True})
    if config.environment_uv:
        env["IRIS_ENV_UV"] = ENV_UV
        mounts.append({"name": ENV_UV_VOLUME, "mountPath": ENV_UV, "readOnly": True})
    if config.environment_offline:
        env["IRIS_ENV_SEED"] = ENV_SEED_DIR
        mounts.append({"name": ENV_SEED_VOLUME, "mountPath": ENV_SEED_DIR, "readOnly": True})
    entries: list[dict[str, Any]] = [{"name": k, "value": v.replace("$", "$$")} for k, v in env.items()]
    entries.append({"name": "IRIS_NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}})
    container: dict[str, Any] = {
        "name": ENV_INIT_CONTAINER,
        "image": image,
        "command": ["python3", "-c", BUILD_SCRIPT.replace("$", "$$")],
        "env": entries,
        "volumeMounts": mounts,
        "terminationMessagePolicy": "FallbackToLogsOnError",
        "securityContext": security_context,
    }
    if resources:
        container["resources"] = resources
    if pull_policy:
        container["imagePullPolicy"] = pull_policy
    return container


def environment_failure(status: dict[str, Any]) -> str | None:
    """The error of an environment build that failed (its init container's last line), else None."""
    for init in status.get("initContainerStatuses") or []:
        if init.get("name") != ENV_INIT_CONTAINER:
            continue
        terminated = (init.get("state") or {}).get("terminated") or {}
        code = terminated.get("exitCode")
        if (
            not terminated
            or code in (None, 0)
            or terminated.get("reason") in ("StartError", "ContainerCannotRun")
        ):
            return None  # built; or the image cannot run it at all (the unstartable init container case)
        lines = [line.strip() for line in (terminated.get("message") or "").splitlines() if line.strip()]
        last = lines[-1] if lines else ""
        index = last.find(ENVIRONMENT_ERROR_PREFIX)
        if index >= 0:
            return last[index:]
        if terminated.get("reason") == "OOMKilled":
            return f"{ENVIRONMENT_ERROR_PREFIX}building the environment ran out of memory (OOMKilled)"
        detail = f": {last}" if last else ""
        return f"{ENVIRONMENT_ERROR_PREFIX}building the environment exited with code {code}{detail}"
    return None


def environment_building(status: dict[str, Any]) -> bool:
    """Whether the pod's environment build is running now (its init container)."""
    return any(
        init.get("name") == ENV_INIT_CONTAINER and (init.get("state") or {}).get("running")
        for init in status.get("initContainerStatuses") or []
    )
