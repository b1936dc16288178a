"""Test images built without a registry, as archives both ``docker load`` and
``ctr -n k8s.io images import`` accept.

- ``iris-test/busybox:1``: Debian's static busybox with its applets linked in ``/bin``.
- ``iris-test/python:3.11``: ``debootstrap --variant=minbase --include=python3,python-is-python3 bookworm`` (Debian
  bookworm's Python 3.11) from the apt mirror this machine is configured with.
- ``iris-test/pause:1``: the pod sandbox image of the real node's containerd: a static Go binary
  (``CGO_ENABLED=0``, a few lines that sleep until SIGTERM/SIGINT and reap children) in a scratch rootfs.

Each archive holds one uncompressed layer, an image config, an OCI layout (``oci-layout``,
``index.json``, ``blobs/sha256/*``) and Docker's ``manifest.json`` pointing at the same blobs. Archives
are cached in ``${IRIS_IMAGE_CACHE:-~/.cache/iris/images}`` under a key hashed from their inputs, so a
second build is a file lookup. ``image_archive(name)`` is the one entry point.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import io
import json
import os
import re
import shutil
import subprocess
import tarfile
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

BUSYBOX_IMAGE = "iris-test/busybox:1"
PYTHON_IMAGE = "iris-test/python:3.11"
PAUSE_IMAGE = "iris-test/pause:1"
TEST_IMAGES = (BUSYBOX_IMAGE, PYTHON_IMAGE)
KNOWN_IMAGES = (*TEST_IMAGES, PAUSE_IMAGE)

# Bump when the recipe changes: it is part of every cache key.
_RECIPE_VERSION = "1"
_SUITE = "bookworm"
_PYTHON_PACKAGES = ("python3", "python-is-python3")  # `python` as in every official Python image
_DEFAULT_MIRROR = "http://deb.debian.org/debian"
_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# The pod sandbox's process: hold the pod's namespaces until told to stop, reaping orphans.
_PAUSE_SOURCE = """package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	child := make(chan os.Signal, 1)
	signal.Notify(child, syscall.SIGCHLD)
	for {
		select {
		case <-stop:
			os.Exit(0)
		case <-child:
			for {
				var status syscall.WaitStatus
				if pid, _ := syscall.Wait4(-1, &status, syscall.WNOHANG, nil); pid <= 0 {
					break
				}
			}
		}
	}
}
"""


class ImageBuildError(Exception):
    """An image could not be built; the message is one sentence."""


@dataclass(frozen=True)
class _Recipe:
    name: str
    key_inputs: tuple[str, ...]
    cmd: tuple[str, ...]


def cache_dir() -> Path:
    return Path(os.environ.get("IRIS_IMAGE_CACHE") or Path.home() / ".cache" / "iris" / "images")


def apt_mirror() -> str:
    """The Debian mirror apt is configured with (deb822 or one-line sources), else deb.debian.org."""
    sources = [Path("/etc/apt/sources.list"), *sorted(Path("/etc/apt/sources.list.d").glob("*"))]
    for path in sources:
        try:
            text = path.read_text()
        except OSError:
            continue
        for match in re.finditer(r"^URIs:\s*(\S+)", text, re.MULTILINE):
            if match.group(1).rstrip("/").endswith("/debian"):
                return match.group(1)
        for match in re.finditer(r"^deb\s+(?:\[[^]]*\]\s+)?(\S+)\s+" + _SUITE + r"\s", text, re.MULTILINE):
            return match.group(1)
    return _DEFAULT_MIRROR


def _busybox_binary() -> Path:
    for candidate in ("/bin/busybox", "/usr/bin/busybox"):
        path = Path(candidate)
        if path.exists():
            return path.resolve()
    raise ImageBuildError("busybox is not installed (apt-get install busybox-static).")


def _file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _recipe(name: str) -> _Recipe:
    if name == BUSYBOX_IMAGE:
        return _Recipe(name, ("busybox", _RECIPE_VERSION, _file_sha256(_busybox_binary())), ("sh",))
    if name == PYTHON_IMAGE:
        inputs = ("python", _RECIPE_VERSION, _SUITE, apt_mirror(), *_PYTHON_PACKAGES)
        return _Recipe(name, inputs, ("python3",))
    if name == PAUSE_IMAGE:
        return _Recipe(name, ("pause", _RECIPE_VERSION, _go_version(), _PAUSE_SOURCE), ("/pause",))
    raise ImageBuildError(f"{name} is not a test image (known: {', '.join(KNOWN_IMAGES)}).")


def _go_version() -> str:
    go = shutil.which("go") or "/usr/local/go/bin/go"
    try:
        return subprocess.run([go, "version"], capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError) as exc:
        raise ImageBuildError(f"go is needed to build {PAUSE_IMAGE} and is not usable: {exc}") from exc


def archive_path(name: str) -> Path:
    """Where ``name``'s archive is (or will be) cached."""
    recipe = _recipe(name)
    key = hashlib.sha256("\0".join(recipe.key_inputs).encode()).hexdigest()[:16]
    return cache_dir() / f"{re.sub(r'[^A-Za-z0-9.]+', '-', name)}-{key}.tar"


def image_archive(name: str) -> Path:
    """The cached archive of test image ``name``, built first when missing (under a file lock)."""
    path = archive_path(name)
    if path.exists():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    with _locked(path.with_suffix(".lock")):
        if path.exists():
            return path
        build = Path(tempfile.mkdtemp(prefix=f".build-{path.stem}-", dir=path.parent))
        try:
            rootfs = build / "rootfs"
            rootfs.mkdir()
            if name == BUSYBOX_IMAGE:
                _busybox_rootfs(rootfs)
            elif name == PAUSE_IMAGE:
                _pause_rootfs(rootfs, build)
            else:
                _debootstrap_rootfs(rootfs, build / "debootstrap.log")
            partial = build / "image.tar"
            _write_archive(rootfs, name, _recipe(name).cmd, partial, build)
            os.replace(partial, path)
        finally:
            _unmount_under(build)
            shutil.rmtree(build, ignore_errors=True)
    return path


@contextlib.contextmanager
def _locked(lock_path: Path) -> Iterator[None]:
    with lock_path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _busybox_rootfs(rootfs: Path) -> None:
    binary = _busybox_binary()
    for directory in ("bin", "etc", "tmp", "root", "proc", "sys", "dev", "usr/bin", "var"):
        (rootfs / directory).mkdir(parents=True, exist_ok=True)
    (rootfs / "tmp").chmod(0o1777)
    shutil.copy2(binary, rootfs / "bin" / "busybox")
    applets = subprocess.run(
        [str(binary), "--list"], capture_output=True, text=True, check=True
    ).stdout.split()
    for applet in applets:
        if applet != "busybox" and "/" not in applet:
            (rootfs / "bin" / applet).symlink_to("busybox")
    (rootfs / "etc" / "passwd").write_text(
        "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/false\n"
    )
    (rootfs / "etc" / "group").write_text("root:x:0:\nnogroup:x:65534:\n")


def _pause_rootfs(rootfs: Path, scratch: Path) -> None:
    source = scratch / "pause-src"
    source.mkdir()
    (source / "go.mod").write_text("module iris.local/pause\n\ngo 1.21\n")
    (source / "main.go").write_text(_PAUSE_SOURCE)
    go = shutil.which("go") or "/usr/local/go/bin/go"
    env = {**os.environ, "CGO_ENABLED": "0", "GOFLAGS": "-buildvcs=false", "GOTOOLCHAIN": "local"}
    result = subprocess.run(
        [go, "build", "-trimpath", "-ldflags", "-s -w", "-o", str(rootfs / "pause"), "."],
        cwd=source,
        env=env,
        capture_output=True,
        text=True,
    )
    if result.returncode != 0:
        raise ImageBuildError(f"could not build the pause binary: {result.stderr.strip()[-300:]}")


def _debootstrap_rootfs(rootfs: Path, log_path: Path) -> None:
    debootstrap = shutil.which("debootstrap") or "/usr/sbin/debootstrap"
    if not Path(debootstrap).exists():
        raise ImageBuildError("debootstrap is not installed (apt-get install debootstrap).")
    command = [
        debootstrap,
        "--variant=minbase",
        "--include=" + ",".join(_PYTHON_PACKAGES),
        _SUITE,
        str(rootfs),
        apt_mirror(),
    ]
    with log_path.open("wb") as log:
        result = subprocess.run(command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    if result.returncode != 0:
        try:
            tail = log_path.read_text(errors="replace").strip().splitlines()[-1:] or [""]
        except OSError:
            tail = [""]
        raise ImageBuildError(f"debootstrap of {_SUITE} failed (exit {result.returncode}): {tail[0]}")
    # Nothing the image needs at run time: apt lists and caches, docs.
    for leftover in ("var/cache/apt/archives", "var/lib/apt/lists", "usr/share/doc", "usr/share/man"):
        target = rootfs / leftover
        if target.is_dir():
            for child in target.iterdir():
                if child.is_dir() and not child.is_symlink():
                    shutil.rmtree(child, ignore_errors=True)
                else:
                    child.unlink(missing_ok=True)


def _unmount_under(directory: Path) -> None:
    """debootstrap mounts /proc and /sys in the target; a failed run may leave them."""
    prefix = str(directory.resolve()) + "/"
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return
    points = [line.split()[4] for line in lines if line.split()[4].startswith(prefix)]
    for point in sorted(points, key=len, reverse=True):
        subprocess.run(["umount", "-l", point], capture_output=True)


def _write_archive(rootfs: Path, name: str, cmd: tuple[str, ...], out: Path, scratch: Path) -> None:
    layer = scratch / "layer.tar"
    result = subprocess.run(
        ["tar", "--sort=name", "--numeric-owner", "--xattrs", "-C", str(rootfs), "-cf", str(layer), "."],
        capture_output=True,
        text=True,
    )
    if result.returncode != 0:
        raise ImageBuildError(f"could not pack the rootfs of {name}: {result.stderr.strip()}")
    layer_digest = _file_sha256(layer)
    layer_size = layer.stat().st_size
    created = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(0))
    config = {
        "architecture": "amd64",
        "os": "linux",
        "created": created,
        "config": {"Env": [f"PATH={_PATH}"], "Cmd": list(cmd), "WorkingDir": "/"},
        "rootfs": {"type": "layers", "diff_ids": [f"sha256:{layer_digest}"]},
        "history": [{"created": created, "created_by": f"iris.testing.images {name}"}],
    }
    config_bytes = json.dumps(config, sort_keys=True).encode()
    config_digest = hashlib.sha256(config_bytes).hexdigest()
    manifest = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {
            "mediaType": "application/vnd.oci.image.config.v1+json",
            "digest": f"sha256:{config_digest}",
            "size": len(config_bytes),
        },
        "layers": [
            {
                "mediaType": "application/vnd.oci.image.layer.v1.tar",
                "digest": f"sha256:{layer_digest}",
                "size": layer_size,
            }
        ],
    }
    manifest_bytes = json.dumps(manifest, sort_keys=True).encode()
    manifest_digest = hashlib.sha256(manifest_bytes).hexdigest()
    repository, _, tag = name.rpartition(":")
    index = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.index.v1+json",
        "manifests": [
            {
                "mediaType": "application/vnd.oci.image.manifest.v1+json",
                "digest": f"sha256:{manifest_digest}",
                "size": len(manifest_bytes),
                "annotations": {
                    "io.containerd.image.name": f"docker.io/{name}",
                    "org.opencontainers.image.ref.name": tag,
                },
            }
        ],
    }
    docker_manifest = [
        {
            "Config": f"blobs/sha256/{config_digest}",
            "RepoTags": [name],
            "Layers": [f"blobs/sha256/{layer_digest}"],
        }
    ]
    assert repository  # names are repository:tag
    with tarfile.open(out, "w", format=tarfile.PAX_FORMAT) as archive:
        _add_bytes(archive, "oci-layout", json.dumps({"imageLayoutVersion": "1.0.0"}).encode())
        _add_bytes(archive, "index.json", json.dumps(index, sort_keys=True).encode())
        _add_bytes(archive, "manifest.json", json.dumps(docker_manifest, sort_keys=True).encode())
        _add_dir(archive, "blobs")
        _add_dir(archive, "blobs/sha256")
        _add_bytes(archive, f"blobs/sha256/{config_digest}", config_bytes)
        _add_bytes(archive, f"blobs/sha256/{manifest_digest}", manifest_bytes)
        archive.add(str(layer), arcname=f"blobs/sha256/{layer_digest}")
    layer.unlink()


def image_id(name: str) -> str:
    """The image id ``docker image inspect`` reports once ``name``'s archive is loaded."""
    with tarfile.open(image_archive(name)) as archive:
        member = archive.extractfile("manifest.json")
        assert member is not None
        config = json.load(member)[0]["Config"]
    return "sha256:" + config.rsplit("/", 1)[-1]


def _add_bytes(archive: tarfile.TarFile, arcname: str, data: bytes) -> None:
    info = tarfile.TarInfo(arcname)
    info.size = len(data)
    info.mode = 0o644
    archive.addfile(info, io.BytesIO(data))


def _add_dir(archive: tarfile.TarFile, arcname: str) -> None:
    info = tarfile.TarInfo(arcname)
    info.type = tarfile.DIRTYPE
    info.mode = 0o755
    archive.addfile(info)
