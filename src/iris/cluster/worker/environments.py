"""Virtual environments for jobs, built with ``uv`` and shared across tasks: the pip packages a job
asks for, and the project environment (``uv sync --frozen`` of the workspace's ``pyproject.toml`` +
``uv.lock``, with the job's extras), or both.

An environment is keyed by the hash of its sorted requirements, of the project's lock, pyproject
and extras (if any), and of the worker's Python, and lives in ``<worker state>/envs/<hash>``. It is built once: the builder holds a lock per hash, and
writes the ``.iris-ready`` marker only after ``uv`` succeeded; a directory without the marker is
a failed or interrupted build and is rebuilt.

The environment uses the worker's own interpreter, and a ``.pth`` file makes the worker's site
directories importable after the environment's own packages, so Iris itself (and the callable
runner) work inside it while the job's packages take precedence.

Installing a requirement runs its build code (any sdist has some), so a build never runs with
the worker's privileges: on a root worker that isolates attempts it runs as a uid leased from the
attempts' pool, in an environment directory (mode 0700) and a cache of its own; afterwards
every process of that uid is killed, and the environment is handed to root and made read-only
for everyone else before the marker is written. On every worker, uv sees only an allow-list of
the worker's environment variables (PATH, locale, proxy, CA and index settings): never the
worker's token or any other ``IRIS_*`` secret.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import shutil
import signal
import site
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from iris.cluster.runtime.isolation import Isolation, UidLease, UidPool
from iris.cluster.runtime.subprocess_runtime import PreparationError
from iris.cluster.worker.build_lock import Cancelled, hash_lock
from iris.rpc.models import ENVIRONMENT_ERROR_PREFIX

READY_MARKER = ".iris-ready"
PARENT_SITE_PTH = "_iris_worker_site.pth"
# The project's own code: uv sync installs the project's dependencies but not the project (the
# environment is shared by attempts, each running a new copy of the workspace). This .pth appends
# the directories named by $IRIS_PROJECT_PATH (the attempt's ``<workspace>/src`` and workspace)
# to sys.path after site-packages, as an editable install would: a src/ layout imports.
PROJECT_PATH_ENV = "IRIS_PROJECT_PATH"
PROJECT_PTH = "_iris_project.pth"
PROJECT_PTH_LINE = (
    "import os, sys; sys.path.extend(p for p in os.environ.get('IRIS_PROJECT_PATH', '').split(os.pathsep) "
    "if p and p not in sys.path and os.path.isdir(p))\n"
)
DEFAULT_BUILD_TIMEOUT_S = 900.0
_OUTPUT_LINES_LOGGED = 200
# The only worker environment variables a build sees (network and index settings an operator
# sets for pip/uv); anything else, the worker's IRIS_TOKEN above all, is left out.
_PASSED_ENV = frozenset(
    {
        "PATH", "HOME", "USER", "XDG_CACHE_HOME", "LANG", "LC_ALL", "LC_CTYPE", "TZ",
        "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "no_proxy",
        "all_proxy", "SSL_CERT_FILE", "SSL_CERT_DIR", "REQUESTS_CA_BUNDLE", "UV_NATIVE_TLS",
        "UV_INDEX_URL", "UV_EXTRA_INDEX_URL", "UV_DEFAULT_INDEX", "UV_INDEX", "UV_INDEX_STRATEGY",
        "UV_HTTP_TIMEOUT", "UV_OFFLINE", "UV_FIND_LINKS", "PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL",
    }
)  # fmt: skip


class EnvironmentBuildError(PreparationError):
    """uv failed (or could not be found); the message says why in one sentence, and starts with
    ``ENVIRONMENT_ERROR_PREFIX`` so the controller calls the failure kind ``environment``."""

    def __init__(self, message: str) -> None:
        super().__init__(
            message if message.startswith(ENVIRONMENT_ERROR_PREFIX) else ENVIRONMENT_ERROR_PREFIX + message
        )


PYPROJECT = "pyproject.toml"
UV_LOCK = "uv.lock"


@dataclass(frozen=True, slots=True)
class ProjectFiles:
    """A workspace's ``pyproject.toml`` and ``uv.lock`` (their bytes) and the extras to sync."""

    pyproject: bytes
    lock: bytes
    extras: tuple[str, ...] = ()

    @classmethod
    def read(cls, directory: Path, extras: Iterable[str] = ()) -> ProjectFiles:
        """The project files of an unpacked workspace; EnvironmentBuildError when one is missing."""
        missing = [name for name in (PYPROJECT, UV_LOCK) if not (directory / name).is_file()]
        if missing:
            raise EnvironmentBuildError(
                f"the job asks for its project environment but its workspace has no {' or '.join(missing)} "
                "(run `uv lock` in the directory you submit from, or submit with --no-sync)"
            )
        return cls(
            (directory / PYPROJECT).read_bytes(),
            (directory / UV_LOCK).read_bytes(),
            tuple(sorted(set(extras))),
        )

    def identity(self) -> dict[str, object]:
        return {
            "lock": hashlib.sha256(self.lock).hexdigest(),
            "pyproject": hashlib.sha256(self.pyproject).hexdigest(),
            "extras": list(self.extras),
            "project_pth": 1,  # environments built before the project's .pth existed lack it
        }

    def describe(self) -> str:
        extras = "".join(f" --extra {e}" for e in self.extras)
        return f"uv sync --frozen{extras} (uv.lock {hashlib.sha256(self.lock).hexdigest()[:12]})"


def normalized_requirements(packages: Iterable[str]) -> tuple[str, ...]:
    """Sorted, de-duplicated, stripped requirement strings (the order a user gave them does not matter)."""
    return tuple(sorted({p.strip() for p in packages if p.strip()}))


def python_identity(executable: str = sys.executable) -> str:
    """What an environment depends on besides its requirements: the interpreter and its site dirs."""
    return json.dumps({"version": sys.version, "executable": executable, "site": parent_site_dirs()})


def environment_hash(requirements: Sequence[str], python: str, project: ProjectFiles | None = None) -> str:
    fields: dict[str, object] = {
        "requirements": list(normalized_requirements(requirements)),
        "python": python,
    }
    if project is not None:
        fields["project"] = project.identity()
    return hashlib.sha256(json.dumps(fields).encode()).hexdigest()[:16]


def parent_site_dirs() -> list[str]:
    """The worker's site-packages directories (its venv's, or the system's)."""
    dirs = list(site.getsitepackages())
    if site.ENABLE_USER_SITE:
        dirs.append(site.getusersitepackages())
    return [d for d in dirs if os.path.isdir(d)]


def find_uv() -> list[str] | None:
    """How to run uv: the ``uv`` on PATH, else ``python -m uv`` when the uv package is installed."""
    path = shutil.which("uv")
    if path:
        return [path]
    if importlib.util.find_spec("uv") is not None:
        return [sys.executable, "-m", "uv"]
    return None


@dataclass(frozen=True, slots=True)
class BuiltEnvironment:
    env_hash: str
    path: Path
    reused: bool

    @property
    def python(self) -> Path:
        return self.path / "bin" / "python"

    @property
    def bin_dir(self) -> Path:
        return self.path / "bin"


IMAGE_UV = "/opt/iris-uv/uv"  # where an in-image build finds the worker's uv binary
IMAGE_CA_FILE = "/opt/iris-uv/ca-certificates.crt"  # and the worker's SSL_CERT_FILE, if set
# Variables of the build's environment that name the worker's own files: not passed into an image.
_HOST_ONLY_ENV = frozenset({"PATH", "USER", "SSL_CERT_FILE", "SSL_CERT_DIR", "REQUESTS_CA_BUNDLE"})


@dataclass(frozen=True, slots=True)
class InImage:
    """Build in a job's container image, with its ``python3``, instead of with the worker's
    interpreter (whose path the image does not have): the builder runs each uv step as a one-off
    container of the image (the worker's uv binary mounted read-only), and the environment is
    keyed by the image's id. Tasks then mount it read-only at the same path."""

    image: str
    image_id: str
    path: str  # the image's PATH (the task's, with the environment's bin first)
    # ContainerTaskRuntime.one_off_argv and .remove
    run_argv: Callable[..., tuple[list[str], dict[str, str]]]
    remove: Callable[[str], None]


def uv_binary() -> str | None:
    """The uv executable itself (not a shell shim): what can be mounted into an image."""
    candidates: list[Path] = []
    try:
        import uv as uv_package  # type: ignore[import-not-found]

        candidates.append(Path(uv_package.find_uv_bin()))
    except (ImportError, FileNotFoundError, AttributeError):
        pass
    candidates += [Path(d) / "uv" for d in os.environ.get("PATH", "").split(os.pathsep) if d]
    candidates += [Path(sys.prefix) / "bin" / "uv", Path(sys.base_prefix) / "bin" / "uv"]
    for candidate in candidates:
        try:
            with open(candidate, "rb") as binary:
                if binary.read(4) == b"\x7fELF":
                    return str(candidate.resolve())
        except OSError:
            continue
    return None


class EnvironmentBuilder:
    def __init__(
        self,
        directory: Path,
        *,
        python: str = sys.executable,
        uv: Sequence[str] | None = None,
        timeout_s: float = DEFAULT_BUILD_TIMEOUT_S,
        isolation: Isolation | None = None,
    ) -> None:
        """With ``isolation`` (a root worker), builds run as a uid leased from its pool."""
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self._isolation = isolation
        if isolation is not None:
            os.chmod(self.directory, 0o711)  # task uids reach their environment, but cannot list them
        self.python = python
        self._uv = list(uv) if uv is not None else None
        self._timeout_s = timeout_s
        self._identity = python_identity(python)

    def hash_of(
        self, packages: Iterable[str], project: ProjectFiles | None = None, in_image: InImage | None = None
    ) -> str:
        return environment_hash(normalized_requirements(packages), self._identity_for(in_image), project)

    def _identity_for(self, in_image: InImage | None) -> str:
        return self._identity if in_image is None else json.dumps({"image": in_image.image_id})

    def ensure(
        self,
        packages: Iterable[str],
        *,
        project: ProjectFiles | None = None,
        in_image: InImage | None = None,
        log: Callable[[str], None] = lambda _line: None,
        cancelled: Callable[[], bool] = lambda: False,
    ) -> BuiltEnvironment:
        """The environment for ``packages`` (on top of ``project``'s locked environment, if
        given), built now if no finished one exists. Raises EnvironmentBuildError (uv's output is
        in ``log``) or Cancelled."""
        requirements = normalized_requirements(packages)
        env_hash = environment_hash(requirements, self._identity_for(in_image), project)
        path = self.directory / env_hash
        if (path / READY_MARKER).exists():
            log(f"reusing environment {env_hash}")
            return BuiltEnvironment(env_hash, path, reused=True)
        with hash_lock(self.directory / f".{env_hash}.lock", cancelled):
            if (path / READY_MARKER).exists():
                log(f"reusing environment {env_hash} (built meanwhile by another attempt)")
                return BuiltEnvironment(env_hash, path, reused=True)
            parts = [project.describe()] if project is not None else []
            if requirements or not parts:
                parts.append(" ".join(requirements))
            where = f" in image {in_image.image}" if in_image is not None else ""
            log(f"building environment {env_hash}{where}: {' + '.join(parts)}")
            started = time.monotonic()
            self._build(path, requirements, project, in_image, log, cancelled)
            log(f"built environment {env_hash} in {time.monotonic() - started:.1f}s")
        return BuiltEnvironment(env_hash, path, reused=False)

    def _build(
        self,
        path: Path,
        requirements: Sequence[str],
        project: ProjectFiles | None,
        in_image: InImage | None,
        log: Callable[[str], None],
        cancelled: Callable[[], bool],
    ) -> None:
        uv = self._uv if self._uv is not None else find_uv()
        binary = uv_binary() if in_image is not None else None
        if uv is None or (in_image is not None and binary is None):
            raise EnvironmentBuildError(
                "cannot build the job's environment: uv is not installed on this worker "
                "(install it with: python -m pip install uv)"
            )
        if in_image is not None:
            uv = [IMAGE_UV]
        shutil.rmtree(path, ignore_errors=True)  # a failed or interrupted earlier build
        cache = self.directory / f".cache-{path.name}"
        shutil.rmtree(cache, ignore_errors=True)
        lease = self._isolation.pool.acquire() if self._isolation is not None else None
        try:
            for directory in (path, cache):
                directory.mkdir(mode=0o700)
                if lease is not None:
                    os.chown(directory, lease.uid, lease.uid)
            env = build_environment(cache if lease is not None or in_image is not None else None)
            image_run = None
            if in_image is not None:
                assert binary is not None
                image_run = _ImageRun(in_image, binary, (path, cache), lease.uid if lease else os.geteuid())
            self._run(
                [
                    *uv,
                    "venv",
                    "--no-config",
                    "--quiet",
                    "--allow-existing",
                    "--python",
                    self.python if in_image is None else "python3",
                    str(path),
                ],
                "creating the environment",
                log,
                cancelled,
                env,
                lease,
                image_run,
            )
            if project is not None:
                self._sync(uv, path, cache, project, log, cancelled, env, lease, image_run)
            if requirements:
                self._run(
                    [
                        *uv,
                        "pip",
                        "install",
                        "--no-config",
                        "--python",
                        str(path / "bin" / "python"),
                        "--",
                        *requirements,
                    ],
                    "installing " + " ".join(requirements),
                    log,
                    cancelled,
                    env,
                    lease,
                    image_run,
                )
        finally:
            if lease is not None:
                kill_uid(lease.uid)  # whatever the build left running (a daemonized build step)
                UidPool.release(lease)
            shutil.rmtree(cache, ignore_errors=True)
        seal(path, lease.uid if lease is not None else None)
        if in_image is None:  # in an image, the callable runner is mounted beside the task instead
            self._link_parent_site(path)
        if project is not None:
            write_project_pth(path)
        (path / READY_MARKER).write_text(
            json.dumps({"requirements": list(requirements), "built_at": time.time()})
        )
        os.chmod(path / READY_MARKER, 0o644)

    def _sync(
        self,
        uv: Sequence[str],
        path: Path,
        scratch: Path,
        project: ProjectFiles,
        log: Callable[[str], None],
        cancelled: Callable[[], bool],
        env: dict[str, str],
        lease: UidLease | None,
        image_run: _ImageRun | None = None,
    ) -> None:
        """``uv sync --frozen`` of a copy of the project's two files (in the build's own scratch
        directory) into ``path``. The project itself is not installed: the task runs in its
        workspace, whose copy changes from attempt to attempt; the project's .pth puts that
        copy's src/ (and root) on sys.path instead."""
        directory = scratch / "project"
        directory.mkdir(mode=0o700)
        for name, data in ((PYPROJECT, project.pyproject), (UV_LOCK, project.lock)):
            (directory / name).write_bytes(data)
        if lease is not None:
            for name in (directory, directory / PYPROJECT, directory / UV_LOCK):
                os.chown(name, lease.uid, lease.uid)
        argv = [
            *uv,
            "sync",
            "--frozen",
            "--no-install-project",
            "--no-config",
            "--python",
            str(path / "bin" / "python"),
            "--project",
            str(directory),
        ]
        for extra in project.extras:
            argv += ["--extra", extra]
        self._run(
            argv,
            project.describe(),
            log,
            cancelled,
            {**env, "UV_PROJECT_ENVIRONMENT": str(path)},
            lease,
            image_run,
        )

    def _link_parent_site(self, path: Path) -> None:
        """A .pth line in the environment's site-packages that appends the worker's site dirs
        (``addsitedir`` also runs their own .pth files, e.g. an editable install of Iris)."""
        version = f"python{sys.version_info.major}.{sys.version_info.minor}"
        site_packages = path / "lib" / version / "site-packages"
        if not site_packages.is_dir():
            raise EnvironmentBuildError(f"uv created the environment {path} without {site_packages}")
        lines = [f"import site; site.addsitedir({d!r})" for d in parent_site_dirs()]
        (site_packages / PARENT_SITE_PTH).write_text("\n".join(lines) + "\n")
        os.chmod(site_packages / PARENT_SITE_PTH, 0o644)  # whatever the worker's umask: tasks read it

    def _run(
        self,
        argv: list[str],
        what: str,
        log: Callable[[str], None],
        cancelled: Callable[[], bool],
        env: dict[str, str],
        lease: UidLease | None,
        image_run: _ImageRun | None = None,
    ) -> None:
        name = None
        if image_run is not None:  # a one-off container of the image runs it, as the build's uid
            name, (argv, env) = image_run.name(), image_run.argv(argv, env)
        elif lease is not None and self._isolation is not None:
            argv = self._isolation.wrap(argv, lease.uid)
        deadline = time.monotonic() + self._timeout_s
        # Output goes to a file, not a pipe: nothing has to drain it while we poll for cancellation.
        with tempfile.TemporaryFile() as output:
            proc = subprocess.Popen(
                argv,
                cwd=self.directory,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=output,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
            try:
                while True:
                    try:
                        code = proc.wait(timeout=0.1)
                        break
                    except subprocess.TimeoutExpired:
                        if cancelled():
                            raise Cancelled() from None
                        if time.monotonic() > deadline:
                            raise EnvironmentBuildError(
                                f"{what} took longer than {self._timeout_s:g}s: gave up"
                            ) from None
            finally:
                if proc.poll() is None:
                    os.killpg(proc.pid, signal.SIGKILL)  # uv and whatever it started
                    proc.wait()
                    if image_run is not None and name is not None:
                        image_run.image.remove(name)  # killing its CLI does not stop the container
            output.seek(0)
            lines = output.read().decode("utf-8", "replace").splitlines()
        for line in lines[-_OUTPUT_LINES_LOGGED:]:
            log(f"uv: {line}")
        if code != 0:
            raise EnvironmentBuildError(f"{what} failed (uv exited with code {code}): {uv_error(lines)}")


class _ImageRun:
    """How the steps of one in-image build run: the image's containers, the worker's uv mounted,
    the environment and scratch directories at their own paths, the image's PATH, as ``uid``."""

    def __init__(self, image: InImage, uv: str, directories: Sequence[Path], uid: int) -> None:
        self.image = image
        self._uv = uv
        self._directories = directories
        self._uid = uid
        self._step = 0
        self._name = ""

    def name(self) -> str:
        """The container of the next step (called before ``argv``)."""
        self._step += 1
        self._name = f"iris-env-{self._directories[0].name}-{self._step}-{os.getpid()}"
        return self._name

    def argv(self, argv: list[str], env: dict[str, str]) -> tuple[list[str], dict[str, str]]:
        mounts = [(self._uv, IMAGE_UV, True), *((str(d), str(d), False) for d in self._directories)]
        inside = {k: v for k, v in env.items() if k not in _HOST_ONLY_ENV}
        inside["PATH"] = self.image.path
        ca_file = env.get("SSL_CERT_FILE")
        if ca_file and os.path.isfile(ca_file):  # the operator's CA bundle (a proxy's): the image lacks it
            mounts.append((os.path.realpath(ca_file), IMAGE_CA_FILE, True))
            inside["SSL_CERT_FILE"] = IMAGE_CA_FILE
        return self.image.run_argv(
            self.image.image, argv, name=self._name, mounts=mounts, env=inside, user=self._uid,
        )  # fmt: skip


def write_project_pth(path: Path) -> None:
    """The project's .pth (see PROJECT_PTH) in the environment's site-packages, whatever its Python."""
    found = sorted(path.glob("lib/python*/site-packages"))
    if not found:
        raise EnvironmentBuildError(f"uv created the environment {path} without lib/python*/site-packages")
    for site_packages in found:
        (site_packages / PROJECT_PTH).write_text(PROJECT_PTH_LINE)
        os.chmod(site_packages / PROJECT_PTH, 0o644)


def project_path(work_dir: str | Path) -> str:
    """$IRIS_PROJECT_PATH for an attempt whose workspace is ``work_dir``: its src/, then itself."""
    return os.pathsep.join((os.path.join(str(work_dir), "src"), str(work_dir)))


def uv_error(lines: Sequence[str], limit: int = 6) -> str:
    """uv's own error lines (from its first ``error:`` or ``×`` line, a few at most, joined), else
    its last line: the one thing a user needs to fix the lock or the requirement."""
    stripped = [line.strip() for line in lines]
    start = next((i for i, line in enumerate(stripped) if line.startswith(("error:", "×", "x "))), None)
    if start is None:
        return next((line for line in reversed(stripped) if line), "no output")
    shown = [line for line in stripped[start:] if line and set(line) - set("|^ ")][:limit]
    return " / ".join(shown)


def build_environment(home: Path | None) -> dict[str, str]:
    """What uv runs with: the allow-listed worker variables; with ``home`` (an isolated build),
    HOME, the uv cache and temporary files all in that directory of the build's own."""
    env = {k: v for k, v in os.environ.items() if k in _PASSED_ENV}
    env.setdefault("PATH", os.defpath)
    env["UV_PYTHON_DOWNLOADS"] = "never"
    if home is not None:
        env.update(HOME=str(home), UV_CACHE_DIR=str(home / "uv"), TMPDIR=str(home), UV_LINK_MODE="copy")
    elif "UV_CACHE_DIR" in os.environ:
        env["UV_CACHE_DIR"] = os.environ["UV_CACHE_DIR"]
    return env


def seal(path: Path, builder: int | None = None) -> None:
    """Hand a built environment to this (the worker's) user, readable by all and writable by
    none else: the uid that built it goes back to the pool, and the next holder must not alter it.
    ``builder``: the uid that built it. What in it that uid does not own is a hard link to someone
    else's file (``/etc/shadow`` where the kernel allows such links): removed, never made readable."""
    me = os.geteuid()
    foreign = builder if builder is not None and builder != me else None
    for root, dirs, files in os.walk(path):
        for name in (*dirs, *files):
            _seal_one(os.path.join(root, name), me, foreign)
    _seal_one(str(path), me, None)


def _seal_one(name: str, me: int, builder: int | None = None) -> None:
    info = os.lstat(name)
    if builder is not None and info.st_uid != builder and not stat.S_ISDIR(info.st_mode):
        os.unlink(name)
        return
    if stat.S_ISLNK(info.st_mode):
        if info.st_uid != me:
            os.lchown(name, me, me)
        return
    if info.st_uid != me:
        os.chown(name, me, me)
    mode = stat.S_IMODE(info.st_mode) & ~0o7022  # no setuid/setgid/sticky, no write but the owner's
    mode |= 0o444 | (0o111 if stat.S_ISDIR(info.st_mode) or info.st_mode & 0o100 else 0)
    os.chmod(name, mode | 0o200)


def processes_of(uid: int) -> list[int]:
    """The pids of live (not zombie) processes whose real or effective uid is ``uid``."""
    pids = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/status") as status:
                fields = dict(line.split(":", 1) for line in status if line[:4] in ("Stat", "Uid:"))
        except (OSError, ValueError):
            continue
        if fields.get("State", "Z").strip().startswith(("Z", "X")):
            continue
        if str(uid) in fields.get("Uid", "").split()[:2]:
            pids.append(int(entry.name))
    return pids


def kill_uid(uid: int) -> None:
    """SIGKILL every process of ``uid`` until none is left (a second or so at most)."""
    for _ in range(100):
        pids = processes_of(uid)
        if not pids:
            return
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        time.sleep(0.01)
