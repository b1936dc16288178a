"""A real Kubernetes node for the local control plane: the pinned kubelet with Debian's containerd
(CRI plugin), runc and CNI bridge, running real containers from the locally built test images.

Where things live (nothing on a host interface, nothing beyond loopback and our namespace):
- a network namespace made here, joined to the host by a veth pair (``iris.testing.netns``):
  the host end's address is the node IP (the kubelet refuses a loopback one); containerd, the CNI
  bridge and every pod live in the namespace, with no route beyond the host and no masquerade;
  the host routes the pod CIDR to the namespace end of the veth, so pods reach what listens on the
  node IP (a local cluster's controller, ``--also-listen``) and the answers come back;
- containerd in a private mount namespace (with tmpfs over ``/run/containerd`` and ``/run/netns``)
  under a child subreaper, so its mounts, shims and containers all end with it; the kubelet joins
  that mount namespace (it hands volume mounts to containerd) but stays in the host's network
  namespace, where it reaches the API server on 127.0.0.1;
- its cgroups under ``/<cgroup root>`` of its own (``cgroupfs``), removed at teardown;
- every file under ``<run dir>/real-node``.

``can_run_real_node()`` says whether this machine allows it (root, cgroups, containerd, runc, the
CNI plugins, ``ip``, ``nsenter``/``unshare``).
"""

from __future__ import annotations

import ipaddress
import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import yaml

from iris.rpc.ports import free_port
from iris.testing import images
from iris.testing.control_plane.kubeconfig import write_kubeconfig
from iris.testing.control_plane.pki import Pki, issue_node_certs
from iris.testing.control_plane.processes import StartupError, alive, launch, stop_group
from iris.testing.netns import NetnsLink

CNI_BIN_DIR = Path("/usr/lib/cni")
CGROUP_ROOT = Path("/sys/fs/cgroup")
# Images imported into containerd's k8s.io namespace (pods name them without a registry).
NODE_IMAGES = (images.PAUSE_IMAGE, images.BUSYBOX_IMAGE, images.PYTHON_IMAGE)
RUNTIME = "containerd"
# containerd's socket, in the tmpfs over /run/containerd of its private mount namespace (a path
# under the run dir can exceed the 104 bytes a unix socket path may have); the kubelet and ctr
# reach it by joining that mount namespace.
SOCKET = "/run/containerd/containerd.sock"
# The node's folder, bind-mounted there too: the kubelet's root dir holds unix sockets as well.
# It is made rshared before the kubelet starts: otherwise the kubelet bind-mounts its root dir
# onto itself at start-up while another of its goroutines is renaming a fresh socket into place
# there, and a rename whose two lookups straddle that mount fails with EXDEV.
NODE_DIR = "/run/containerd/node"
# Host paths the kubelet and containerd write whatever their configuration says (device plugin
# sockets, /var/log/containers links, CNI results): a tmpfs over each in their mount namespace.
PRIVATE_DIRS = ("/var/lib/kubelet", "/var/log/containers", "/var/lib/cni")


def missing_requirements() -> list[str]:
    """What this machine lacks for a real node; empty when it can run one."""
    missing = []
    if os.geteuid() != 0:
        missing.append("root")
    for tool in ("containerd", "ctr", "runc", "ip", "nsenter", "unshare", "iptables-save"):
        if shutil.which(tool) is None:
            missing.append(tool)
    if not (CNI_BIN_DIR / "bridge").exists() or not (CNI_BIN_DIR / "host-local").exists():
        missing.append("CNI plugins in /usr/lib/cni (containernetworking-plugins)")
    if not _cgroup_hierarchies():
        missing.append("cgroups (v1 controllers under /sys/fs/cgroup)")
    return missing


def can_run_real_node() -> bool:
    return not missing_requirements()


def _cgroup_hierarchies() -> list[Path]:
    """The cgroup v1 hierarchies mounted under /sys/fs/cgroup (one folder per controller)."""
    if not CGROUP_ROOT.is_dir():
        return []
    return sorted(
        p
        for p in CGROUP_ROOT.iterdir()
        if p.is_dir() and not p.is_symlink() and (p / "cgroup.procs").exists()
    )


@dataclass
class RealNodeState:
    """What teardown needs, kept in the control plane's state.json."""

    name: str
    netns: str
    host_if: str
    node_ip: str
    ns_ip: str
    pod_cidr: str
    cgroup_root: str
    dir: str
    pids: dict[str, int] = field(default_factory=dict)
    images: list[str] = field(default_factory=list)
    ready_seconds: float = 0.0


def _subnet_for(seed: int) -> int:
    """10.<n>.0.0/24 for the veth, 10.<n>.128.0/24 for pods, n in 30-69 (clear of the partition
    (77+) and chaos (100+) tests' namespaces) and not in use by another live node."""
    used = subprocess.run(["ip", "-o", "addr"], capture_output=True, text=True, check=False).stdout
    for step in range(40):
        n = 30 + (seed + step) % 40
        if f" 10.{n}.0." not in used:
            return n
    raise StartupError("no free 10.<n>.0.0/24 for a real node's veth (n in 30-69)")


def _containerd_config(root: Path, ns_ip: str) -> str:
    cri = 'plugins."io.containerd.grpc.v1.cri"'
    return f"""version = 2
root = "{root / "root"}"
state = "{root / "state"}"
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper",
  "io.containerd.internal.v1.tracing", "io.containerd.tracing.processor.v1.otlp"]

[grpc]
  address = "{SOCKET}"

[ttrpc]
  address = "{SOCKET}.ttrpc"

[plugins."io.containerd.internal.v1.opt"]
  path = "{root / "opt"}"

[{cri}]
  sandbox_image = "docker.io/{images.PAUSE_IMAGE}"
  restrict_oom_score_adj = true
  stream_server_address = "{ns_ip}"
  stream_server_port = "0"
  disable_apparmor = true
  enable_selinux = false
  max_concurrent_downloads = 3

[{cri}.containerd]
  snapshotter = "overlayfs"
  default_runtime_name = "runc"

[{cri}.containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"

[{cri}.containerd.runtimes.runc.options]
  SystemdCgroup = false

[{cri}.cni]
  bin_dir = "{CNI_BIN_DIR}"
  conf_dir = "{root / "cni"}"
  max_conf_num = 1
"""


def _cni_config(pod_cidr: str, ipam_dir: Path, node_ip: str) -> dict[str, Any]:
    """The bridge (its address, the pod CIDR's first, is the pods' gateway) and one route in each
    pod: to the veth's subnet, where the node IP is. No default route: nothing beyond the host."""
    node_subnet = str(ipaddress.ip_network(f"{node_ip}/24", strict=False))
    gateway = str(next(ipaddress.ip_network(pod_cidr).hosts()))
    return {
        "cniVersion": "0.4.0",
        "name": "iris-pods",
        "plugins": [
            {
                "type": "bridge",
                "bridge": "iris-cni0",
                "isGateway": True,
                "ipMasq": False,
                "hairpinMode": True,
                "ipam": {
                    "type": "host-local",
                    "ranges": [[{"subnet": pod_cidr, "gateway": gateway}]],
                    "routes": [{"dst": node_subnet, "gw": gateway}],
                    "dataDir": str(ipam_dir),
                },
            }
        ],
    }


def _kubelet_config(
    state: RealNodeState, pki_dir: Path, serving: Any, ca: Path, port: int, healthz: int
) -> dict[str, Any]:
    base = Path(state.dir)
    return {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "address": state.node_ip,
        "port": port,
        "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1",
        "healthzPort": healthz,
        # Every caller proves who it is (a certificate from the plane's CA, or a bearer token the
        # API server confirms with a TokenReview) and the API server's RBAC decides what it may do
        # (a SubjectAccessReview per request: nodes/proxy for exec, nodes/log, nodes/stats, ...).
        # The kubelet makes both reviews as system:node:<name> (the Node authorizer allows them).
        "authentication": {
            "anonymous": {"enabled": False},
            "webhook": {"enabled": True, "cacheTTL": "2m"},
            "x509": {"clientCAFile": str(ca)},
        },
        "authorization": {
            "mode": "Webhook",
            "webhook": {"cacheAuthorizedTTL": "5m", "cacheUnauthorizedTTL": "30s"},
        },
        "tlsCertFile": str(serving.cert),
        "tlsPrivateKeyFile": str(serving.key),
        "containerRuntimeEndpoint": f"unix://{SOCKET}",
        "cgroupDriver": "cgroupfs",
        "cgroupRoot": state.cgroup_root,
        "failCgroupV1": False,
        "failSwapOn": False,
        "makeIPTablesUtilChains": False,
        "podLogsDir": str(base / "pod-logs"),
        "resolvConf": "",
        # Never evict test pods for a full disk or busy memory, never collect our imported images.
        "evictionHard": {
            "memory.available": "1Mi",
            "nodefs.available": "1%",
            "nodefs.inodesFree": "1%",
            "imagefs.available": "1%",
        },
        "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99,
        "serializeImagePulls": False,
        "kubeAPIQPS": 100,
        "kubeAPIBurst": 200,
        "syncFrequency": "10s",
        "nodeStatusUpdateFrequency": "4s",
        "shutdownGracePeriod": "0s",
        "localStorageCapacityIsolation": True,
    }


def start_real_node(
    run_dir: Path,
    pki: Pki,
    server_url: str,
    bin_dir: Path,
    *,
    tied_to_parent: bool,
    on_launch: Any = None,
) -> RealNodeState:
    """Make the namespace, start containerd and the kubelet, import the images. Returns as soon as
    the kubelet is running; the caller waits for the Node to be Ready. On failure, cleans up."""
    missing = missing_requirements()
    if missing:
        raise StartupError(f"this machine cannot run a real kubelet node (missing: {', '.join(missing)})")
    seed = os.getpid() + int(time.time())
    subnet = _subnet_for(seed)
    tag = f"{seed % 100000:05d}"
    base = run_dir / "real-node"
    link = NetnsLink(f"iris-kn{tag}", subnet=subnet)
    state = RealNodeState(
        name="iris-kubelet-0",
        netns=link.name,
        host_if=link.host_if,
        node_ip=link.host_ip,
        ns_ip=link.ns_ip,
        pod_cidr=f"10.{subnet}.128.0/24",
        cgroup_root=f"/iris-kubelet-{tag}",
        dir=str(base),
    )
    (run_dir / "real-node.json").write_text(json.dumps(asdict(state)))
    try:
        _start(state, link, run_dir, pki, server_url, bin_dir, tied_to_parent, on_launch)
    except BaseException:
        stop_real_node(state)
        raise
    return state


def _start(
    state: RealNodeState,
    link: NetnsLink,
    run_dir: Path,
    pki: Pki,
    server_url: str,
    bin_dir: Path,
    tied_to_parent: bool,
    on_launch: Any,
) -> None:
    started = time.monotonic()
    base = Path(state.dir)
    logs = run_dir / "logs"
    cd_dir = base / "containerd"
    for sub in ("root", "state", "opt", "cni", "ipam"):
        (cd_dir / sub).mkdir(parents=True, exist_ok=True)
    (base / "pod-logs").mkdir(parents=True, exist_ok=True)
    link.create()
    # The namespace side: forwarding between the pod bridge and the veth (this namespace only).
    subprocess.run(["ip", "netns", "exec", link.name, "sysctl", "-qw", "net.ipv4.ip_forward=1"], check=False)
    # The host side: pods' addresses are behind the namespace end of the veth. Pods reach the
    # controller on the node IP (the veth's host end), and its answers go back the same way, never
    # out of the host's default route; a strict rp_filter accepts them for the same reason. The
    # route goes with the veth at teardown.
    route = ["ip", "route", "replace", state.pod_cidr, "via", state.ns_ip, "dev", state.host_if]
    done = subprocess.run(route, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise StartupError(f"{' '.join(route)} failed: {done.stderr.strip()}")
    for hierarchy in _cgroup_hierarchies():
        (hierarchy / state.cgroup_root.lstrip("/")).mkdir(exist_ok=True)
    (cd_dir / "config.toml").write_text(_containerd_config(cd_dir, state.ns_ip))
    (cd_dir / "cni" / "10-iris.conflist").write_text(
        json.dumps(_cni_config(state.pod_cidr, cd_dir / "ipam", state.node_ip), indent=2)
    )
    # containerd: in the namespace, in a private mount namespace, under a subreaper.
    script = (
        "mkdir -p /run/containerd && mount -t tmpfs -o mode=0711 iris-containerd /run/containerd && "
        "mount -t tmpfs -o mode=0755 iris-netns /run/netns && "
        f'mkdir -p {NODE_DIR} && mount --bind "{base}" {NODE_DIR} && mount --make-rshared {NODE_DIR} && '
        + "".join(f"mkdir -p {d} && mount -t tmpfs iris-node {d} && " for d in PRIVATE_DIRS)
        + 'exec "$@"'
    )
    argv = [
        "nsenter", f"--net=/run/netns/{link.name}", "--",
        "unshare", "--mount", "--propagation", "private", "--",
        "sh", "-c", script, "sh",
        sys.executable, "-m", "iris.testing.control_plane.subreaper",
        *(["--die-with-parent"] if tied_to_parent else []), "--",
        "containerd", "--config", str(cd_dir / "config.toml"), "--log-level", "warn",
    ]  # fmt: skip
    # Not SIGKILLed with the parent: the subreaper itself stops on its parent's death, cleanly.
    proc = launch("containerd", argv, logs, cwd=base)
    state.pids["containerd"] = proc.pid
    if on_launch:
        on_launch("containerd", proc)
    _wait(lambda: _ctr(proc.pid, "version").returncode == 0, "containerd answering", proc, logs)
    for name in NODE_IMAGES:
        archive = images.image_archive(name)
        done = _ctr(proc.pid, "-n", "k8s.io", "images", "import", str(archive), timeout=300)
        if done.returncode != 0:
            raise StartupError(f"ctr images import {name} failed: {done.stderr.strip()[-300:]}")
        state.images.append(name)
    # The kubelet: host network namespace (node IP = host end of the veth), containerd's mounts.
    pki_dir = base / "pki"
    pki_dir.mkdir(exist_ok=True)
    client, serving = issue_node_certs(pki_dir, pki.ca, state.name, state.node_ip)
    kubeconfig = write_kubeconfig(
        base / "kubelet.kubeconfig",
        server=server_url,
        ca_cert=pki.ca.cert,
        user=f"system:node:{state.name}",
        client_cert=client.cert,
        client_key=client.key,
    )
    port, healthz = free_port(), free_port()
    config = base / "kubelet-config.yaml"
    config.write_text(yaml.safe_dump(_kubelet_config(state, pki_dir, serving, pki.ca.cert, port, healthz)))
    kubelet = [
        "nsenter", f"--mount=/proc/{proc.pid}/ns/mnt", "--",
        str(bin_dir / "kubelet"),
        f"--config={config}",
        f"--kubeconfig={kubeconfig}",
        f"--root-dir={NODE_DIR}/kubelet",
        f"--hostname-override={state.name}",
        f"--node-ip={state.node_ip}",
        "--v=1",
    ]  # fmt: skip
    kproc = launch("kubelet", kubelet, logs, cwd=base, tied_to_parent=tied_to_parent)
    state.pids["kubelet"] = kproc.pid
    if on_launch:
        on_launch("kubelet", kproc)
    state.ready_seconds = round(time.monotonic() - started, 1)
    (run_dir / "real-node.json").write_text(json.dumps(asdict(state)))


def _ctr(pid: int, *args: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    """ctr in containerd's mount namespace (where its socket is)."""
    return subprocess.run(
        ["nsenter", f"--mount=/proc/{pid}/ns/mnt", "--", "ctr", "--address", SOCKET, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def _wait(condition: Any, what: str, proc: subprocess.Popen[bytes], logs: Path, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            tail = (logs / "containerd.log").read_text(errors="replace").splitlines()[-15:]
            raise StartupError(f"containerd exited with {proc.returncode}; its log ends:\n" + "\n".join(tail))
        try:
            if condition():
                return
        except (OSError, subprocess.SubprocessError):
            pass
        time.sleep(0.1)
    raise StartupError(f"timed out after {timeout:.0f}s waiting for {what}")


def stop_real_node(state: RealNodeState) -> None:
    """Kubelet, then containerd (its subreaper kills shims and containers; its mount namespace and
    every mount in it go with it), then the namespace, the veth and the cgroups."""
    for name in ("kubelet", "containerd"):
        pid = state.pids.get(name)
        if pid and alive(pid):
            stop_group(pid, grace=15.0)
    NetnsLink.remove(state.netns, state.host_if)
    for hierarchy in _cgroup_hierarchies():
        _remove_cgroup_tree(hierarchy / state.cgroup_root.lstrip("/"))
    shutil.rmtree(state.dir, ignore_errors=True)


def _remove_cgroup_tree(top: Path) -> None:
    if not top.is_dir():
        return
    for _ in range(50):
        dirs = sorted((p for p in top.rglob("*") if p.is_dir()), key=lambda p: len(p.parts), reverse=True)
        for d in [*dirs, top]:
            try:
                d.rmdir()
            except OSError:
                pass
        if not top.exists():
            return
        time.sleep(0.1)


def load_state(run_dir: Path) -> RealNodeState | None:
    path = run_dir / "real-node.json"
    if not path.is_file():
        return None
    return RealNodeState(**json.loads(path.read_text()))
