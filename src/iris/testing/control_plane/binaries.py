"""Where the control plane's binaries are: the cache folder ``scripts/k8s-control-plane build`` fills."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

BINARIES = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kueue", "kubelet")
BUILD_HINT = "run `scripts/k8s-control-plane build` first (see docs/kubernetes.md)"


class MissingBinaries(RuntimeError):
    """The control plane has not been built (or the cache is incomplete)."""


@dataclass(frozen=True)
class Versions:
    kubernetes: str
    kueue: str
    etcd: str

    @property
    def cache_key(self) -> str:
        return f"k8s-{self.kubernetes}-kueue-{self.kueue}-etcd-{self.etcd}"


def repo_root() -> Path | None:
    """The source checkout this package runs from, if any (the tools live there, not in the wheel)."""
    for parent in Path(__file__).resolve().parents:
        if (parent / "tools" / "k8s" / "versions.env").is_file():
            return parent
    return None


def read_versions(root: Path) -> Versions:
    values: dict[str, str] = {}
    for line in (root / "tools" / "k8s" / "versions.env").read_text().splitlines():
        name, sep, value = line.strip().partition("=")
        if sep and not name.startswith("#"):
            values[name] = value
    return Versions(values["KUBERNETES_VERSION"], values["KUEUE_VERSION"], values["ETCD_VERSION"])


def cache_root() -> Path:
    return Path(os.environ.get("IRIS_K8S_CACHE") or Path.home() / ".cache" / "iris")


def bin_dir() -> Path:
    """``$IRIS_K8S_BIN_DIR``, else the versioned cache folder of this checkout's pinned versions."""
    explicit = os.environ.get("IRIS_K8S_BIN_DIR")
    if explicit:
        return Path(explicit)
    root = repo_root()
    if root is None:
        raise MissingBinaries("IRIS_K8S_BIN_DIR is not set and no source checkout with tools/k8s was found")
    return cache_root() / read_versions(root).cache_key / "bin"


def require_binaries() -> Path:
    """The bin folder, or MissingBinaries naming what is absent and how to build it."""
    folder = bin_dir()
    missing = [name for name in BINARIES if not os.access(folder / name, os.X_OK)]
    if missing or not (folder / ".complete").is_file():
        what = ", ".join(missing) if missing else "the build stamp"
        raise MissingBinaries(f"control plane binaries missing in {folder} ({what}): {BUILD_HINT}")
    return folder
