"""emptyDir and hostPath volumes on a host without containers: each mount path maps to a folder
of the pod (emptyDir) or to the host path itself (hostPath; ``readOnly`` is not enforced).

A container's working directory, and env values and arguments that name a mounted path, are
rewritten to the host folder, which is how a process on this machine sees "the same volume" as
the other containers of its pod.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any


def pod_volumes(pod: dict[str, Any], pod_dir: Path) -> dict[str, Path]:
    """emptyDir volume name -> its folder under the pod's directory (created); hostPath volume
    name -> its path (a ``DirectoryOrCreate`` one created)."""
    out: dict[str, Path] = {}
    for volume in (pod.get("spec") or {}).get("volumes") or []:
        if "emptyDir" in volume:
            folder = pod_dir / "volumes" / volume["name"]
            folder.mkdir(parents=True, exist_ok=True)
            out[volume["name"]] = folder
        elif "hostPath" in volume:
            host = Path(volume["hostPath"]["path"])
            if volume["hostPath"].get("type") == "DirectoryOrCreate":
                host.mkdir(parents=True, exist_ok=True)
            out[volume["name"]] = host
    return out


def container_mounts(container: dict[str, Any], volumes: Mapping[str, Path]) -> dict[str, Path]:
    """mountPath -> host folder, for the container's emptyDir and hostPath mounts."""
    return {
        m["mountPath"].rstrip("/") or "/": volumes[m["name"]]
        for m in container.get("volumeMounts") or []
        if m.get("name") in volumes
    }


def to_host(path: str, mounts: Mapping[str, Path]) -> str:
    for mount_path, folder in sorted(mounts.items(), key=lambda kv: -len(kv[0])):
        if path == mount_path:
            return str(folder)
        if path.startswith(mount_path + "/"):
            return str(folder / path[len(mount_path) + 1 :])
    return path
