"""Attempts in container images, driven through the docker CLI (binary configurable: podman works).

Each attempt is one ``docker run`` in the foreground: the CLI's stdout/stderr are the attempt's
pipes (so logs go to the same attempt log and shipper as processes), its exit code is the task's,
and SIGTERM to it reaches the task (``--sig-proxy`` and ``--init``). The container:

- ``--network host``, ``--init``, ``--cpus``/``--memory`` from the attempt's resources, ``--shm-size``,
  ``--device`` for each allocated device, ``--ulimit core=0`` (nofile stays the engine's default,
  within the host's hard limit);
- ``--cap-drop ALL``, ``--security-opt no-new-privileges``, ``--user`` the attempt's own uid under
  isolation;
- the attempt's work dir (its workspace bundle) bind-mounted at the same path and used as the
  working dir, exactly where a process attempt runs;
- labels ``iris.managed``, ``iris.attempt``, ``iris.job``, ``iris.task``, ``iris.worker`` (and
  ``iris.timeout-s``, ``iris.secret-env`` when set): a restarted worker adopts the running
  containers a previous run left (``adopt``, ``follow``, ``await_exit``: ``docker logs --follow`` and
  ``docker wait``), and removes the rest; the watchdog removes them when fencing.

Images: ``image inspect``, then ``pull`` under a per-image lock (at most ``PULL_ATTEMPTS`` pulls, the
CLI's progress lines in the attempt log); a failure is one sentence starting with ``image <name>``
(failure kind ``image``). The container runs with ``--rm`` (removed by the engine before the CLI
returns); exit 137 with a memory limit reads as OOM-killed (``State.OOMKilled`` when the container is
still there); a CLI killed before its container ended is followed by ``rm -f``.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import re
import shutil
import subprocess
import sysconfig
import tempfile
import threading
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from datetime import datetime
from typing import Any

from iris.cluster.runtime.task_runtime import Adoption, ExitFacts, Launch, LeftAttempt
from iris.rpc.models import RunSpec
from iris.rpc.units import format_bytes

logger = logging.getLogger(__name__)

PULL_ATTEMPTS = 2
DEFAULT_PULL_TIMEOUT_S = 600.0
# An image seen present is trusted this long before it is inspected again (if-not-present).
_PRESENT_TTL_S = 60.0
_CLI_TIMEOUT_S = 60.0
_NAME_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]")
MANAGED_LABEL = "iris.managed"
# Labels a restarted worker needs to adopt a container: the attempt's timeout, and the names of
# its secret variables (their values are in the container's config), to mask them in its log.
TIMEOUT_LABEL = "iris.timeout-s"
SECRETS_LABEL = "iris.secret-env"
_SAFE_UID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
# Where a callable's runner finds the iris package and cloudpickle inside the container (first on
# its PYTHONPATH), and the worker's own site-packages (pydantic for the Iris client, and whatever
# else a pickled callable refers to), which the runner puts last on its path: the image's own
# packages win, the worker's fill in what the image lacks (same Python minor version as the worker).
RUNNER_DIR = "/opt/iris-runner"
RUNNER_DEPS_DIR = "/opt/iris-runner-site"
RUNNER_DEPS_ENV = "IRIS_RUNNER_FALLBACK_PATH"


def default_cli() -> str:
    """``$IRIS_CONTAINER_CLI``, else ``docker``."""
    return os.environ.get("IRIS_CONTAINER_CLI") or "docker"


# Variables the docker/podman CLI (or the loader, or Go's runtime) reads for itself: where it
# looks for programs, libraries, its config, plugins, credential helpers, daemon and proxies.
_CLI_NAMES = frozenset({"PATH", "HOME", "TMPDIR", "SHELL", "NOTIFY_SOCKET", "IFS", "ENV", "BASH_ENV"})
_CLI_PREFIXES = ("LD_", "DYLD_", "DOCKER_", "BUILDKIT_", "BUILDX_", "CONTAINER", "PODMAN_", "REGISTRY_",
                 "STORAGE_", "XDG_", "GO", "SSL_", "DBUS_", "SSH_", "KRB5")  # fmt: skip


def steers_the_cli(name: str) -> bool:
    """Whether a task variable named ``name`` would change what the engine CLI itself does."""
    upper = name.upper()
    return upper in _CLI_NAMES or upper.startswith(_CLI_PREFIXES) or upper.endswith("_PROXY")


def container_name(worker_id: str, attempt_uid: str) -> str:
    return _NAME_UNSAFE.sub("_", f"iris-{attempt_uid}-{worker_id}")[:200]


class ImageUnavailable(Exception):
    """The attempt's image cannot be had; the message is one sentence starting with ``image <name>``."""


class ContainerTaskRuntime:
    """The ``TaskRuntime`` of attempts whose spec names an image."""

    name = "container"

    def __init__(
        self,
        worker_id: str,
        *,
        cli: str | None = None,
        env: Mapping[str, str] | None = None,
        pull_timeout_s: float = DEFAULT_PULL_TIMEOUT_S,
        device_dir: str = "/dev",
    ) -> None:
        self.worker_id = worker_id
        binary = cli or default_cli()
        self.cli = shutil.which(binary) or binary
        self._env = dict(os.environ if env is None else env)
        self._env.pop("IRIS_TOKEN", None)
        self._pull_timeout_s = pull_timeout_s
        self._device_dir = device_dir
        self._locks_lock = threading.Lock()
        self._image_locks: dict[str, threading.Lock] = {}
        self._present: dict[str, float] = {}
        self._limits: dict[str, int] = {}
        self._pids: dict[str, int] = {}
        self._callables: set[str] = set()
        # Attempt -> the --env-file holding its variables the CLI must not read itself.
        self._env_files: dict[str, str] = {}
        # Adopted attempts: their ``docker wait`` (the exit code, once the container ends).
        self._waits: dict[str, subprocess.Popen[str]] = {}

    # ------------------------------------------------------------------ TaskRuntime

    def needed(self, spec: RunSpec) -> bool:
        return spec.image is not None

    def ready(self, spec: RunSpec) -> bool:
        """The image was seen here lately and the policy does not ask to pull it again."""
        assert spec.image is not None
        return spec.image_pull_policy != "always" and self._seen_lately(spec.image)

    def prepare(self, spec: RunSpec, log: Callable[[str], None]) -> None:
        from iris.cluster.runtime.subprocess_runtime import PreparationError

        assert spec.image is not None
        try:
            self.ensure_image(spec.image, spec.image_pull_policy, log)
        except ImageUnavailable as exc:
            raise PreparationError(str(exc)) from None

    def start(self, launch: Launch) -> tuple[list[str], dict[str, str]]:
        spec = launch.spec
        assert spec.image is not None
        uid = spec.attempt_uid
        work_dir = launch.work_dir
        args = [
            self.cli,
            "run",
            "--rm",
            "--name",
            container_name(self.worker_id, uid),
            "--init",
            "--network",
            "host",
            "--cap-drop",
            "ALL",
            "--security-opt",
            "no-new-privileges",
            "--ulimit",
            "core=0",
            "--label",
            f"{MANAGED_LABEL}=true",
            "--label",
            f"iris.attempt={uid}",
            "--label",
            f"iris.job={spec.job_id}",
            "--label",
            f"iris.task={spec.task_id}",
            "--label",
            f"iris.worker={self.worker_id}",
            *(["--label", f"{TIMEOUT_LABEL}={spec.timeout_s:g}"] if spec.timeout_s else ()),
            *(["--label", f"{SECRETS_LABEL}={','.join(sorted(spec.secret_env))}"] if spec.secret_env else ()),
            "-v",
            f"{work_dir}:{work_dir}",
            "-w",
            work_dir,
        ]
        resources = spec.resources
        if resources.cpu_millicores:
            args += ["--cpus", f"{resources.cpu_millicores / 1000:g}"]
        memory = resources.memory_bytes
        if memory:
            args += ["--memory", str(memory), "--memory-swap", str(memory)]
            self._limits[uid] = memory
        args += ["--shm-size", str(max(64 << 20, memory // 2))]
        if launch.task_uid is not None:
            args += ["--user", f"{launch.task_uid}:{launch.task_uid}"]
        for node in device_nodes(launch.device_env, self._device_dir):
            # A node of the worker's device dir is the container's /dev/<name>, wherever the worker
            # keeps it (IRIS_DEVICE_DIR): CUDA and TPU runtimes look in /dev.
            inside = f"/dev/{os.path.basename(node)}" if os.path.dirname(node) == self._device_dir else node
            args += ["--device", f"{node}:{inside}"]
        task_env = dict(launch.env)
        argv = list(launch.argv)
        if spec.entrypoint.kind != "command":
            # ``python -u -m RUNNER PAYLOAD``: the image's python3 runs the worker's runner, with the
            # iris package and cloudpickle mounted read-only (the image needs no Iris install).
            payload = argv[-1]
            argv = ["python3", *argv[1:]]
            for name, source in runner_packages().items():
                args += ["-v", f"{source}:{RUNNER_DIR}/{name}:ro"]
            fallback = []
            for number, source in enumerate(worker_site_packages()):
                fallback.append(f"{RUNNER_DEPS_DIR}/{number}")
                args += ["-v", f"{source}:{fallback[-1]}:ro"]
            args += ["-v", f"{payload}:{payload}:ro"]
            before = task_env.get("PYTHONPATH")
            task_env["PYTHONPATH"] = f"{RUNNER_DIR}:{before}" if before else RUNNER_DIR
            task_env[RUNNER_DEPS_ENV] = ":".join(fallback)
            task_env["PYTHONDONTWRITEBYTECODE"] = "1"
            self._callables.add(uid)
        venv = task_env.get("VIRTUAL_ENV")
        if venv:  # the job's environment, built in this image by the worker: read-only, same path
            args += ["-v", f"{venv}:{venv}:ro"]
        env = dict(self._env)
        own: list[str] = []
        for key, value in task_env.items():
            if not steers_the_cli(key):
                args += ["-e", key]  # the value comes from the CLI's own environment: not on argv
                env[key] = value
            elif "\n" in value or "\r" in value:
                args += ["-e", f"{key}={value}"]  # an env file cannot hold it
            else:
                own.append(f"{key}={value}\n")
        if own:
            # The CLI runs as the worker (root): the task's PATH, LD_PRELOAD or DOCKER_CONFIG must
            # not be the CLI's own. The container gets them from a file only root can read (not
            # on the command line, which any local user can read while the task runs).
            args += ["--env-file", self._write_env_file(uid, own)]
        args.append(spec.image)
        args += argv
        return args, env

    def _write_env_file(self, attempt_uid: str, lines: Sequence[str]) -> str:
        fd, path = tempfile.mkstemp(prefix="iris-env-", suffix=".list")  # 0600, the worker's
        with os.fdopen(fd, "w", encoding="utf-8", errors="surrogateescape") as out:
            out.writelines(lines)
        self._env_files[attempt_uid] = path
        return path

    def _drop_env_file(self, attempt_uid: str) -> None:
        path = self._env_files.pop(attempt_uid, None)
        if path is not None:
            try:
                os.unlink(path)
            except OSError:
                pass

    def observe(self, attempt_uid: str, returncode: int) -> ExitFacts:
        self._drop_env_file(attempt_uid)
        name = container_name(self.worker_id, attempt_uid)
        facts = ExitFacts()
        waiter = self._waits.pop(attempt_uid, None)
        if waiter is not None:  # adopted: its ``docker logs`` has ended; ``docker wait`` has the exit code
            code = _waited(waiter, wait=returncode >= 0)
            if returncode < 0 or code is None:
                self.release(attempt_uid)
            if code is None:
                self._limits.pop(attempt_uid, None)
                self._pids.pop(attempt_uid, None)
                if returncode < 0:
                    return ExitFacts()
                return ExitFacts(
                    lost=True,
                    message="its container ended while the worker was down or restarting: its exit "
                    "code and last output are unknown",
                )
            returncode = code
        limit = self._limits.pop(attempt_uid, 0)
        self._pids.pop(attempt_uid, None)
        if waiter is None or facts.message is None:
            facts = ExitFacts(exit_code=returncode if waiter is not None else None)
        if attempt_uid in self._callables:
            self._callables.discard(attempt_uid)
            if returncode == 127:  # the engine could not find the command in the image
                return ExitFacts(
                    message="a Python callable needs python3 in its image, and this image has none "
                    "on its PATH."
                )
        if returncode < 0:
            # The CLI itself was killed (after the stop grace, or by a fence): the container may
            # still run, and ``--rm`` only removes it once it exits.
            self.release(attempt_uid)
            return facts
        # ``--rm``: the engine removed the container before the CLI exited (nothing to inspect), so
        # a memory-limited container that died of SIGKILL (137) is taken as OOM-killed; a container
        # still there (the engine could not remove it) is inspected for State.OOMKilled.
        if returncode != 0:
            state = self._inspect_state(name) if returncode == 137 else None
            oom = bool(state.get("OOMKilled")) if state else (returncode == 137 and limit > 0)
            if oom:
                size = format_bytes(limit) if limit else "its limit"
                facts = ExitFacts(
                    oom=True,
                    message=f"out of memory (the container reached its memory limit and was OOM-killed): "
                    f"used {size}, limit {size}",
                    exit_code=137,
                )
            if state is not None:
                self.release(attempt_uid)
        return facts

    def kill(self, attempt_uid: str, grace_s: float) -> None:
        # SIGTERM to the attempt's ``docker run`` reaches the task (sig-proxy, --init); if the CLI
        # is SIGKILLed after the grace, ``observe`` removes the container with ``rm -f``. An
        # adopted container has no ``docker run`` of ours: the engine passes the SIGTERM on.
        if attempt_uid in self._waits:
            name = container_name(self.worker_id, attempt_uid)
            threading.Thread(
                target=self._run, args=(["kill", "--signal", "TERM", name],), daemon=True
            ).start()

    def exec_argv(self, attempt_uid: str, argv: Sequence[str]) -> list[str]:
        return [self.cli, "exec", container_name(self.worker_id, attempt_uid), *argv]

    def exec_env(self, task_env: Mapping[str, str]) -> dict[str, str]:
        # The CLI runs as the worker (root): the task's LD_PRELOAD, PATH or DOCKER_HOST must not
        # steer it. The command in the container gets the container's environment anyway.
        return dict(self._env)

    def process_status(self, attempt_uid: str) -> dict[str, Any]:
        return {"container": container_name(self.worker_id, attempt_uid)}

    def usage(self, attempt_uid: str) -> int | None:
        return None

    def container_pid(self, attempt_uid: str) -> int:
        """The host pid of the container's init (its processes' root, for usage sampling); 0 when
        not (yet) running. One CLI call per attempt, remembered."""
        known = self._pids.get(attempt_uid)
        if known:
            return known
        result = self._run(
            ["inspect", "--format", "{{.State.Pid}}", container_name(self.worker_id, attempt_uid)]
        )
        try:
            pid = int(result.stdout.strip()) if result.returncode == 0 else 0
        except ValueError:
            pid = 0
        if pid > 0:
            self._pids[attempt_uid] = pid
        return pid

    def adopt(self, work_root: str) -> Adoption:
        """Containers a previous run of this worker left (labelled with its id, working in a
        directory under ``work_root``: a worker of another cluster may have the same id): the
        running ones are returned to be adopted; the others (created but never started, or exited
        and kept) are removed."""
        listed = self._listed()
        if not listed:
            return Adoption()
        running: list[LeftAttempt] = []
        removed: list[str] = []
        described = self._describe([name for name, _ in listed])
        for name, uid in listed:
            found = described.get(name)
            if found is None:
                continue  # gone meanwhile
            status, left = found
            if not left.work_dir.startswith(work_root.rstrip("/") + "/"):
                continue  # not this worker's
            if status == "running" and _SAFE_UID.match(uid) and left.attempt_uid == uid:
                running.append(left)
            else:
                removed.append(name)
        if removed:
            self._run(["rm", "-f", *removed])
        return Adoption(tuple(running), tuple(removed))

    def follow(self, left: LeftAttempt) -> tuple[list[str], dict[str, str]]:
        """``docker logs --follow``: the container's whole output (the caller skips what is
        logged already), until it ends."""
        return [self.cli, "logs", "--follow", left.name], dict(self._env)

    def await_exit(self, left: LeftAttempt) -> None:
        """Start a ``docker wait`` on an adopted container (at once: ``--rm`` removes it, exit code
        and all, as soon as it ends); ``observe`` reads the exit code from it."""
        self._waits[left.attempt_uid] = subprocess.Popen(
            [self.cli, "wait", left.name],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=self._env,
            text=True,
            errors="replace",
            start_new_session=True,
        )
        if left.memory_bytes:
            self._limits[left.attempt_uid] = left.memory_bytes

    def _describe(self, names: Sequence[str]) -> dict[str, tuple[str, LeftAttempt]]:
        """Each of ``names`` still there: its state and what adopting it needs (one ``inspect``)."""
        fields = "\t".join(
            (
                "{{.Name}}",
                "{{.State.Status}}",
                "{{json .Config.Labels}}",
                "{{.HostConfig.Memory}}",
                "{{.Config.WorkingDir}}",
                "{{.Config.User}}",
                "{{.State.StartedAt}}",
                "{{json .Config.Env}}",
            )
        )
        result = self._run(["inspect", "--format", fields, *names])
        found: dict[str, tuple[str, LeftAttempt]] = {}
        for line in result.stdout.splitlines():  # a container gone meanwhile: no line, an error
            parts = line.split("\t")
            if len(parts) != 8:
                continue
            name, status, labels_json, memory, work_dir, user, started, env_json = parts
            try:
                labels = json.loads(labels_json) or {}
                env = dict(e.split("=", 1) for e in (json.loads(env_json) or []) if "=" in e)
                timeout = labels.get(TIMEOUT_LABEL)
                secrets = [key for key in labels.get(SECRETS_LABEL, "").split(",") if key]
                found[name.lstrip("/")] = (
                    status,
                    LeftAttempt(
                        attempt_uid=labels.get("iris.attempt", ""),
                        name=name.lstrip("/"),
                        job_id=labels.get("iris.job", ""),
                        task_id=labels.get("iris.task", ""),
                        work_dir=work_dir,
                        memory_bytes=int(memory or 0),
                        task_uid=int(user.split(":")[0]) if user.split(":")[0].isdigit() else None,
                        started_at=_engine_time(started),
                        timeout_s=float(timeout) if timeout else None,
                        masks=tuple(env[key] for key in secrets if key in env),
                    ),
                )
            except (ValueError, TypeError, AttributeError):
                continue
        return found

    def remove_attempts(self, attempt_uids: Collection[str]) -> list[str]:
        """Remove this worker's containers of ``attempt_uids`` whatever their state (the watchdog's
        sweep: a container created while its ``docker run`` was being killed is never started, so
        ``--rm`` never removes it)."""
        wanted = set(attempt_uids)
        doomed = [name for name, uid in self._listed() if uid in wanted]
        if doomed:
            self._run(["rm", "-f", *doomed])
        return doomed

    def _listed(self) -> list[tuple[str, str]]:
        """(name, attempt uid) of every container labelled with this worker, in any state."""
        listed = self._run(
            [
                "ps",
                "-a",
                "--filter",
                f"label=iris.worker={self.worker_id}",
                "--format",
                '{{.Names}}\t{{.Label "iris.attempt"}}',
            ]
        )
        if listed.returncode != 0:
            return []
        pairs = (line.partition("\t") for line in listed.stdout.splitlines())
        return [(name, uid) for name, _, uid in pairs if name]

    def release(self, attempt_uid: str) -> None:
        self._drop_env_file(attempt_uid)
        waiter = self._waits.pop(attempt_uid, None)
        if waiter is not None:
            _waited(waiter, wait=False)
        self._limits.pop(attempt_uid, None)
        self._callables.discard(attempt_uid)
        self._pids.pop(attempt_uid, None)
        self._run(["rm", "-f", container_name(self.worker_id, attempt_uid)])

    # ------------------------------------------------------------------ images

    def ensure_image(self, image: str, policy: str, log: Callable[[str], None]) -> None:
        """Have ``image`` locally per ``policy``; raises ImageUnavailable (one sentence)."""
        if policy != "always" and self._seen_lately(image):
            return
        with self._lock_for(image):
            if policy != "always":
                if self._seen_lately(image):
                    return
                if self._run(["image", "inspect", "--format", "{{.Id}}", image]).returncode == 0:
                    self._present[image] = time.monotonic()
                    return
                if policy == "never":
                    raise ImageUnavailable(
                        f"image {image} is not on this worker and its pull policy is never."
                    )
            reason = ""
            for number in range(1, PULL_ATTEMPTS + 1):
                log(f"pulling image {image} (pull {number} of {PULL_ATTEMPTS})")
                reason = self._pull(image, log)
                if not reason:
                    self._present[image] = time.monotonic()
                    log(f"pulled image {image}")
                    return
                log(f"pull {number} of image {image} failed: {reason}")
            raise ImageUnavailable(f"image {image} could not be pulled: {reason}")

    def _seen_lately(self, image: str) -> bool:
        seen = self._present.get(image)
        return seen is not None and time.monotonic() - seen < _PRESENT_TTL_S

    def _pull(self, image: str, log: Callable[[str], None]) -> str:
        """'' on success, else the CLI's last error line."""
        try:
            proc = subprocess.Popen(
                [self.cli, "pull", image],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                env=self._env,
                text=True,
                errors="replace",
            )
        except OSError as exc:
            return f"could not run {self.cli}: {exc.strerror or exc}"
        timer = threading.Timer(self._pull_timeout_s, proc.kill)
        timer.start()
        last = ""
        try:
            assert proc.stdout is not None
            for line in proc.stdout:
                line = line.rstrip()
                if line:
                    last = line
                    log(line)
            code = proc.wait()
        finally:
            timer.cancel()
        if code == 0:
            return ""
        if code < 0:
            return f"no answer within {self._pull_timeout_s:g}s"
        return last.removeprefix("Error response from daemon: ") or f"exit code {code}"

    def _lock_for(self, image: str) -> threading.Lock:
        with self._locks_lock:
            return self._image_locks.setdefault(image, threading.Lock())

    # ------------------------------------------------------------------ one-off containers

    def image_facts(self, image: str) -> tuple[str, str]:
        """The image's id and its PATH (from its config; the usual default when it sets none)."""
        result = self._run(["image", "inspect", "--format", "{{.Id}} {{json .Config.Env}}", image])
        if result.returncode != 0:
            raise ImageUnavailable(f"image {image} could not be inspected: {result.stderr.strip()}")
        image_id, _, env_json = result.stdout.strip().partition(" ")
        try:
            config_env = json.loads(env_json) or []
        except ValueError:
            config_env = []
        path = next((e[5:] for e in config_env if isinstance(e, str) and e.startswith("PATH=")), None)
        return image_id, path or "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

    def one_off_argv(
        self,
        image: str,
        argv: Sequence[str],
        *,
        name: str,
        mounts: Sequence[tuple[str, str, bool]],
        env: Mapping[str, str],
        user: int,
    ) -> tuple[list[str], dict[str, str]]:
        """A container of ``image`` that runs ``argv`` and is removed (e.g. an environment build):
        host network, no capabilities, as ``user``, ``mounts`` as (host, container, read-only)."""
        args = [self.cli, "run", "--rm", "--name", name, "--network", "host", "--cap-drop", "ALL"]
        args += ["--security-opt", "no-new-privileges", "--user", f"{user}:{user}"]
        for source, target, read_only in mounts:
            args += ["-v", f"{source}:{target}" + (":ro" if read_only else "")]
        process_env = dict(self._env)
        for key, value in env.items():
            if steers_the_cli(key):  # HOME (the build's own dir), PATH (the image's): not the CLI's
                args += ["-e", f"{key}={value}"]
            else:
                args += ["-e", key]
                process_env[key] = value
        return [*args, image, *argv], process_env

    def remove(self, name: str) -> None:
        """Remove a container by name (gone already is fine)."""
        self._run(["rm", "-f", name])

    # ------------------------------------------------------------------ CLI

    def _inspect_state(self, name: str) -> dict[str, Any] | None:
        result = self._run(["inspect", "--format", "{{json .State}}", name])
        if result.returncode != 0:
            return None
        try:
            state = json.loads(result.stdout)
        except ValueError:
            return None
        return state if isinstance(state, dict) else None

    def _run(self, args: Sequence[str]) -> subprocess.CompletedProcess[str]:
        try:
            return subprocess.run(
                [self.cli, *args],
                stdin=subprocess.DEVNULL,
                capture_output=True,
                text=True,
                errors="replace",
                env=self._env,
                timeout=_CLI_TIMEOUT_S,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            logger.warning("%s %s failed: %s", self.cli, " ".join(args[:2]), exc)
            return subprocess.CompletedProcess([self.cli, *args], 1, "", str(exc))


def _waited(waiter: subprocess.Popen[str], *, wait: bool) -> int | None:
    """The exit code ``docker wait`` printed; None if it could not tell (the container was gone
    before it started). ``wait=False``: only if it has already finished (it is killed otherwise)."""
    try:
        out, _ = waiter.communicate(timeout=_CLI_TIMEOUT_S if wait else 0.01)
    except subprocess.TimeoutExpired:
        waiter.kill()
        waiter.communicate()
        return None
    text = (out or "").strip()
    return int(text) if waiter.returncode == 0 and text.lstrip("-").isdigit() else None


def _engine_time(text: str) -> float | None:
    """An engine timestamp (RFC 3339, nanoseconds) as epoch seconds."""
    try:
        head, _, frac = text.rstrip("Z").partition(".")
        return datetime.fromisoformat(head + "+00:00").timestamp() + (float(f"0.{frac}") if frac else 0.0)
    except ValueError:
        return None


@functools.cache
def runner_packages() -> dict[str, str]:
    """The packages the callable runner imports, by name: the worker's own copies (pure Python; the
    runner itself needs only the standard library besides them)."""
    import cloudpickle

    import iris

    return {
        "iris": os.path.dirname(os.path.abspath(iris.__file__)),
        "cloudpickle": os.path.dirname(os.path.abspath(cloudpickle.__file__)),
    }


@functools.cache
def worker_site_packages() -> list[str]:
    """The worker's site-packages directories (its venv's, when it runs in one)."""
    paths = sysconfig.get_paths()
    found: list[str] = []
    for key in ("purelib", "platlib"):
        path = os.path.abspath(paths[key])
        if path not in found and os.path.isdir(path):
            found.append(path)
    return found


def device_nodes(device_env: Mapping[str, str], device_dir: str = "/dev") -> list[str]:
    """Device files of the attempt's allocated accelerators: ``/dev/nvidia<i>`` (plus the control
    nodes) for ``CUDA_VISIBLE_DEVICES``, ``/dev/accel<i>`` for TPU chips, ``IRIS_DEVICE_PATHS``
    (comma-separated) as given; only those that exist."""
    nodes: list[str] = []
    gpus = device_env.get("CUDA_VISIBLE_DEVICES", "")
    if gpus and gpus != "-1":
        for index in gpus.split(","):
            if index.strip().isdigit():
                nodes.append(f"{device_dir}/nvidia{index.strip()}")
        nodes += [f"{device_dir}/{name}" for name in ("nvidiactl", "nvidia-uvm", "nvidia-uvm-tools")]
    chips = device_env.get("TPU_VISIBLE_CHIPS", "")
    for index in chips.split(","):
        if index.strip().isdigit():
            nodes.append(f"{device_dir}/accel{index.strip()}")
    for path in device_env.get("IRIS_DEVICE_PATHS", "").split(","):
        if path.strip():
            nodes.append(path.strip())
    return [node for node in nodes if os.path.exists(node)]
