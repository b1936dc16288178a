"""Virtual environments for jobs that ask for pip packages, built with ``uv`` and shared across tasks.

An environment is keyed by the hash of its sorted requirements and of the worker's Python, and
lives in ``<worker state>/envs/<hash>``. It is built once: the builder holds a lock per hash, and
writes the ``.iris-ready`` marker only after ``uv`` succeeded; a directory without the marker is
a failed or interrupted build and is rebuilt.

The environment uses the worker's own interpreter, and a ``.pth`` file makes the worker's site
directories importable after the environment's own packages, so Iris itself (and the callable
runner) work inside it while the job's packages take precedence.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import shutil
import signal
import site
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from iris.cluster.runtime.subprocess_runtime import PreparationError
from iris.cluster.worker.build_lock import Cancelled, hash_lock

READY_MARKER = ".iris-ready"
PARENT_SITE_PTH = "_iris_worker_site.pth"
DEFAULT_BUILD_TIMEOUT_S = 900.0
_OUTPUT_LINES_LOGGED = 200


class EnvironmentBuildError(PreparationError):
    """uv failed (or could not be found); the message says why in one sentence."""


def normalized_requirements(packages: Iterable[str]) -> tuple[str, ...]:
    """Sorted, de-duplicated, stripped requirement strings (the order a user gave them does not matter)."""
    return tuple(sorted({p.strip() for p in packages if p.strip()}))


def python_identity(executable: str = sys.executable) -> str:
    """What an environment depends on besides its requirements: the interpreter and its site dirs."""
    return json.dumps({"version": sys.version, "executable": executable, "site": parent_site_dirs()})


def environment_hash(requirements: Sequence[str], python: str) -> str:
    payload = json.dumps({"requirements": list(normalized_requirements(requirements)), "python": python})
    return hashlib.sha256(payload.encode()).hexdigest()[:16]


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


class EnvironmentBuilder:
    def __init__(
        self,
        directory: Path,
        *,
        python: str = sys.executable,
        uv: Sequence[str] | None = None,
        timeout_s: float = DEFAULT_BUILD_TIMEOUT_S,
    ) -> None:
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.python = python
        self._uv = list(uv) if uv is not None else None
        self._timeout_s = timeout_s
        self._identity = python_identity(python)

    def hash_of(self, packages: Iterable[str]) -> str:
        return environment_hash(normalized_requirements(packages), self._identity)

    def ensure(
        self,
        packages: Iterable[str],
        *,
        log: Callable[[str], None] = lambda _line: None,
        cancelled: Callable[[], bool] = lambda: False,
    ) -> BuiltEnvironment:
        """The environment for ``packages``, built now if no finished one exists. Raises
        EnvironmentBuildError (uv's output is in ``log``) or Cancelled."""
        requirements = normalized_requirements(packages)
        env_hash = environment_hash(requirements, self._identity)
        path = self.directory / env_hash
        if (path / READY_MARKER).exists():
            log(f"reusing environment {env_hash}")
            return BuiltEnvironment(env_hash, path, reused=True)
        with hash_lock(self.directory / f".{env_hash}.lock", cancelled):
            if (path / READY_MARKER).exists():
                log(f"reusing environment {env_hash} (built meanwhile by another attempt)")
                return BuiltEnvironment(env_hash, path, reused=True)
            log(f"building environment {env_hash}: {' '.join(requirements)}")
            started = time.monotonic()
            self._build(path, requirements, log, cancelled)
            log(f"built environment {env_hash} in {time.monotonic() - started:.1f}s")
        return BuiltEnvironment(env_hash, path, reused=False)

    def _build(
        self,
        path: Path,
        requirements: Sequence[str],
        log: Callable[[str], None],
        cancelled: Callable[[], bool],
    ) -> None:
        uv = self._uv if self._uv is not None else find_uv()
        if uv is None:
            raise EnvironmentBuildError(
                "cannot build the job's environment: uv is not installed on this worker "
                "(install it with: python -m pip install uv)"
            )
        shutil.rmtree(path, ignore_errors=True)  # a failed or interrupted earlier build
        self._run(
            [*uv, "venv", "--no-config", "--quiet", "--python", self.python, str(path)],
            "creating the environment",
            log,
            cancelled,
        )
        self._link_parent_site(path)
        if requirements:
            self._run(
                [
                    *uv,
                    "pip",
                    "install",
                    "--no-config",
                    "--python",
                    str(path / "bin" / "python"),
                    *requirements,
                ],
                "installing " + " ".join(requirements),
                log,
                cancelled,
            )
        (path / READY_MARKER).write_text(
            json.dumps({"requirements": list(requirements), "built_at": time.time()})
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

    def _run(
        self, argv: list[str], what: str, log: Callable[[str], None], cancelled: Callable[[], bool]
    ) -> None:
        env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "UV_PROJECT_ENVIRONMENT")}
        env["UV_PYTHON_DOWNLOADS"] = "never"
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
            output.seek(0)
            lines = output.read().decode("utf-8", "replace").splitlines()
        for line in lines[-_OUTPUT_LINES_LOGGED:]:
            log(f"uv: {line}")
        if code != 0:
            last = next((line.strip() for line in reversed(lines) if line.strip()), "no output")
            raise EnvironmentBuildError(f"{what} failed (uv exited with code {code}): {last}")
