"""A network namespace joined to this one by a veth pair: run a worker in it, then cut the link to
partition it from the controller (both directions at once) and restore it. Needs root (CAP_NET_ADMIN).

    with NetnsLink("iris-p1", subnet=77) as link:   # host side 10.77.0.1, namespace side 10.77.0.2
        argv = [*link.exec_prefix, sys.executable, "-m", "iris.cluster.worker", ...]
        link.partition(); ...; link.heal()
"""

from __future__ import annotations

import os
import shutil
import subprocess


def netns_available() -> bool:
    """Root with the ``ip`` tool: namespaces and veth pairs can be made here."""
    return os.geteuid() == 0 and shutil.which("ip") is not None


class NetnsLink:
    def __init__(self, name: str, *, subnet: int) -> None:
        if not 1 <= subnet <= 254:
            raise ValueError("subnet must be 1-254 (addresses 10.<subnet>.0.1 and .2)")
        self.name = name
        self.host_if = f"{name[:10]}-h"
        self.ns_if = f"{name[:10]}-n"
        self.host_ip = f"10.{subnet}.0.1"
        self.ns_ip = f"10.{subnet}.0.2"
        self.exec_prefix = ["ip", "netns", "exec", name]

    def __enter__(self) -> NetnsLink:
        self.create()
        return self

    def __exit__(self, *exc: object) -> None:
        self.delete()

    def create(self) -> None:
        self.delete()  # a namespace left by an interrupted run
        for cmd in (
            f"netns add {self.name}",
            f"link add {self.host_if} type veth peer name {self.ns_if}",
            f"link set {self.ns_if} netns {self.name}",
            f"addr add {self.host_ip}/24 dev {self.host_if}",
            f"link set {self.host_if} up",
            f"-n {self.name} addr add {self.ns_ip}/24 dev {self.ns_if}",
            f"-n {self.name} link set {self.ns_if} up",
            f"-n {self.name} link set lo up",
        ):
            _ip(cmd)

    def partition(self) -> None:
        """Neither side reaches the other (packets are dropped, connections hang, then time out)."""
        _ip(f"link set {self.host_if} down")

    def heal(self) -> None:
        _ip(f"link set {self.host_if} up")

    def delete(self) -> None:
        NetnsLink.remove(self.name, self.host_if)

    @staticmethod
    def remove(name: str, host_if: str) -> None:
        """Delete the veth pair and the namespace (either may already be gone)."""
        subprocess.run(["ip", "link", "del", host_if], capture_output=True)
        subprocess.run(["ip", "netns", "del", name], capture_output=True)


def _ip(args: str) -> None:
    result = subprocess.run(["ip", *args.split()], capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError(f"ip {args}: {result.stderr.strip() or result.returncode}")
