"""Debian's dockerd for tests and local clusters, isolated from the host's own engine.

``up`` starts (or reuses) a dockerd with its own data root, exec root, socket and config file;
no bridge, no iptables rules, no IP forwarding (tasks use ``--network host``), ``nofile`` ulimits
within this sandbox's hard limit; under a small supervisor that is a child subreaper (PID 1 here
does not reap, so containerd shims would become zombies). ``down`` stops it and unmounts anything
left under its roots. ``images`` builds (cached) and loads the test images.

CLI: ``python -m iris.testing.container_engine up|down|images|env`` (``scripts/container-engine``).
"""

from __future__ import annotations

import argparse
import ctypes
import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from iris.testing import images
from iris.testing.proc_state import running

_PR_SET_CHILD_SUBREAPER = 36
_START_TIMEOUT_S = 90.0
_STOP_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class EnginePaths:
    data_root: Path
    run_dir: Path

    @property
    def exec_root(self) -> Path:
        return self.run_dir / "exec"

    @property
    def socket(self) -> Path:
        return self.run_dir / "docker.sock"

    @property
    def host(self) -> str:
        return f"unix://{self.socket}"

    @property
    def supervisor_pid(self) -> Path:
        return self.run_dir / "supervisor.pid"

    @property
    def log(self) -> Path:
        return self.run_dir / "dockerd.log"


def default_paths() -> EnginePaths:
    return EnginePaths(
        data_root=Path(os.environ.get("IRIS_ENGINE_DATA_ROOT", "/var/lib/iris-docker")),
        run_dir=Path(os.environ.get("IRIS_ENGINE_RUN_DIR", "/run/iris-docker")),
    )


class EngineError(Exception):
    """The engine could not be started or used; the message is one sentence."""


@dataclass
class Engine:
    paths: EnginePaths
    started: bool  # False: an engine already answered on the socket and was reused
    supervisor: subprocess.Popen[bytes] | None = None

    @property
    def host(self) -> str:
        return self.paths.host

    def env(self) -> dict[str, str]:
        return {"DOCKER_HOST": self.host}


class _UnixHTTPConnection(http.client.HTTPConnection):
    def __init__(self, path: str, timeout: float) -> None:
        super().__init__("localhost", timeout=timeout)
        self._path = path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        sock.connect(self._path)
        self.sock = sock


def ping(paths: EnginePaths, timeout: float = 2.0) -> bool:
    """True when a dockerd answers ``/_ping`` on the socket."""
    if not paths.socket.exists():
        return False
    connection = _UnixHTTPConnection(str(paths.socket), timeout)
    try:
        connection.request("GET", "/_ping")
        return connection.getresponse().status == 200
    except OSError:
        return False
    finally:
        connection.close()


def dockerd_binary() -> str:
    for candidate in ("/usr/sbin/dockerd", "/usr/bin/dockerd"):
        if Path(candidate).exists():
            return candidate
    raise EngineError("dockerd is not installed (apt-get install docker.io).")


def docker_cli() -> str:
    """The docker client: Debian's (same version as its dockerd) when present, else any on PATH."""
    for candidate in ("/usr/bin/docker",):
        if Path(candidate).exists():
            return candidate
    from shutil import which

    found = which("docker")
    if found is None:
        raise EngineError("no docker client is installed (apt-get install docker.io).")
    return found


def available() -> bool:
    try:
        dockerd_binary()
    except EngineError:
        return False
    return True


def _dockerd_command(paths: EnginePaths) -> list[str]:
    config = paths.run_dir / "daemon.json"
    return [
        dockerd_binary(),
        "--config-file",
        str(config),
        "--data-root",
        str(paths.data_root),
        "--exec-root",
        str(paths.exec_root),
        "--pidfile",
        str(paths.run_dir / "dockerd.pid"),
        "-H",
        paths.host,
        "--bridge=none",
        "--iptables=false",
        "--ip6tables=false",
        "--ip-forward=false",
        "--ip-masq=false",
        "--userland-proxy=false",
        "--default-ulimit",
        "nofile=20000:20000",
        "--log-level",
        "warn",
    ]


def up(paths: EnginePaths | None = None) -> Engine:
    """Start dockerd under a subreaper supervisor, or reuse one answering on our socket."""
    paths = paths or default_paths()
    if ping(paths):
        return Engine(paths, started=False)
    command = _dockerd_command(paths)
    _stop_stale(paths)
    paths.run_dir.mkdir(parents=True, exist_ok=True)
    paths.data_root.mkdir(parents=True, exist_ok=True)
    (paths.run_dir / "daemon.json").write_text("{}\n")
    paths.socket.unlink(missing_ok=True)
    with paths.log.open("ab") as log:
        supervisor = subprocess.Popen(
            [
                sys.executable,
                "-c",
                "import sys; from iris.testing.container_engine import supervise; supervise(sys.argv[1:])",
                *command,
            ],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            start_new_session=True,
            close_fds=True,
        )
    paths.supervisor_pid.write_text(f"{supervisor.pid}\n")
    deadline = time.monotonic() + _START_TIMEOUT_S
    while not ping(paths):
        if supervisor.poll() is not None:
            raise EngineError(f"dockerd exited at start (exit {supervisor.returncode}); see {paths.log}.")
        if time.monotonic() > deadline:
            _terminate(supervisor.pid, supervisor)
            raise EngineError(
                f"dockerd did not answer on {paths.socket} within {_START_TIMEOUT_S:.0f} s; see {paths.log}."
            )
        time.sleep(0.1)
    return Engine(paths, started=True, supervisor=supervisor)


def down(engine_or_paths: Engine | EnginePaths | None = None) -> None:
    """Stop the engine (its containers stop with it) and leave no mounts or sockets behind."""
    if isinstance(engine_or_paths, Engine):
        paths, supervisor = engine_or_paths.paths, engine_or_paths.supervisor
    else:
        paths, supervisor = engine_or_paths or default_paths(), None
    pid = supervisor.pid if supervisor is not None else _read_pid(paths.supervisor_pid)
    if pid is not None:
        _terminate(pid, supervisor)
    else:
        dockerd_pid = _read_pid(paths.run_dir / "dockerd.pid")
        if dockerd_pid is not None:
            _terminate(dockerd_pid, None)
    _unmount_under(paths.exec_root)
    _unmount_under(paths.data_root)
    for leftover in (
        paths.socket,
        paths.supervisor_pid,
        paths.run_dir / "dockerd.pid",
        paths.run_dir / "manual",
    ):
        leftover.unlink(missing_ok=True)


def _stop_stale(paths: EnginePaths) -> None:
    pid = _read_pid(paths.supervisor_pid)
    if pid is not None:
        _terminate(pid, None)
    _unmount_under(paths.exec_root)


def _read_pid(path: Path) -> int | None:
    try:
        pid = int(path.read_text().strip())
    except (OSError, ValueError):
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None
    except PermissionError:
        pass
    return pid


def _terminate(pid: int, child: subprocess.Popen[bytes] | None) -> None:
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + _STOP_TIMEOUT_S
    while time.monotonic() < deadline:
        if child is not None:
            if child.poll() is not None:
                return
        elif not running(pid):
            return
        time.sleep(0.05)
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        return
    if child is not None:
        child.wait(10)


def _unmount_under(directory: Path) -> None:
    prefix = str(directory) + "/"
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return
    points = [fields[4] for fields in (line.split() for line in lines) if fields[4].startswith(prefix)]
    for point in sorted(points, key=len, reverse=True):
        subprocess.run(["umount", "-l", point], capture_output=True)


def supervise(command: list[str]) -> None:
    """Run ``command`` as a child subreaper: reap every orphan, forward SIGTERM/SIGINT, and once the
    command exits wait (bounded) for the remaining descendants, then kill what is left."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    child = os.posix_spawn(command[0], command, dict(os.environ))

    def forward(signum: int, _frame: object) -> None:
        try:
            os.kill(child, signal.SIGTERM)
        except ProcessLookupError:
            pass

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    code = 1
    while True:
        pid, status = os.waitpid(-1, 0)
        if pid == child:
            code = os.waitstatus_to_exitcode(status)
            break
    deadline = time.monotonic() + 20.0
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            break
        if pid == 0:
            if time.monotonic() > deadline:
                for orphan in _children(os.getpid()):
                    try:
                        os.kill(orphan, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
                deadline = time.monotonic() + 5.0
            time.sleep(0.05)
    sys.exit(code if code >= 0 else 1)


def _children(parent: int) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as handle:
                    fields = handle.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == parent:
                found.append(int(entry))
    return found


def _users_dir(paths: EnginePaths) -> Path:
    return paths.run_dir / "users"


def acquire(paths: EnginePaths | None = None) -> Engine:
    """``up`` for a test session: registers this process as a user of the engine (see ``release``)."""
    paths = paths or default_paths()
    paths.run_dir.mkdir(parents=True, exist_ok=True)
    with images._locked(paths.run_dir / "users.lock"):
        engine = up(paths)
        _users_dir(paths).mkdir(exist_ok=True)
        (_users_dir(paths) / str(os.getpid())).touch()
        return engine


def release(engine: Engine) -> None:
    """Undo ``acquire``: stop the engine when no other live session uses it and no one started it
    by hand (``container-engine up`` leaves a ``manual`` marker)."""
    paths = engine.paths
    with images._locked(paths.run_dir / "users.lock"):
        (_users_dir(paths) / str(os.getpid())).unlink(missing_ok=True)
        others = [
            entry
            for entry in _users_dir(paths).iterdir()
            if entry.name.isdigit() and running(int(entry.name))
        ]
        if others or (paths.run_dir / "manual").exists():
            return
        down(engine if engine.started else paths)


def load_images(engine: Engine, names: tuple[str, ...] = images.TEST_IMAGES) -> None:
    """Build (or take from the cache) and ``docker load`` each test image not already loaded."""
    env = {**os.environ, **engine.env()}
    cli = docker_cli()
    for name in names:
        archive = images.image_archive(name)
        wanted = images.image_id(name)
        have = subprocess.run(
            [cli, "image", "inspect", "--format", "{{.Id}}", name], capture_output=True, text=True, env=env
        )
        if have.returncode == 0 and have.stdout.strip() == wanted:
            continue
        loaded = subprocess.run(
            [cli, "load", "-q", "-i", str(archive)], capture_output=True, text=True, env=env
        )
        if loaded.returncode != 0:
            raise EngineError(f"docker load of {name} failed: {loaded.stderr.strip()}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="container-engine",
        description="Debian's dockerd for Iris tests and local clusters (own data/exec roots, no bridge, no iptables).",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("up", help="start (or reuse) the engine; prints the export DOCKER_HOST=... line")
    sub.add_parser("down", help="stop the engine; leaves no mounts, links or iptables rules")
    sub.add_parser("env", help="print the export DOCKER_HOST=... line")
    images_parser = sub.add_parser(
        "images", help="build (cached) and load the test images; starts the engine if needed"
    )
    images_parser.add_argument(
        "--build-only", action="store_true", help="build the archives, do not load them"
    )
    args = parser.parse_args(argv)
    paths = default_paths()
    try:
        if args.command == "up":
            up(paths)
            (paths.run_dir / "manual").touch()
            print(f"export DOCKER_HOST={paths.host}")
        elif args.command == "down":
            down(paths)
        elif args.command == "env":
            print(f"export DOCKER_HOST={paths.host}")
        else:
            for name in images.TEST_IMAGES:
                print(f"{name}: {images.image_archive(name)}", file=sys.stderr)
            if not args.build_only:
                engine = up(paths)
                load_images(engine)
                print(json.dumps({"loaded": list(images.TEST_IMAGES), "docker_host": paths.host}))
    except (EngineError, images.ImageBuildError) as exc:
        print(f"container-engine: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
