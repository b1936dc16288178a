"""Start and stop a real control plane on loopback: etcd, kube-apiserver, kube-controller-manager,
kube-scheduler, the Kueue manager and our node agent, then install Iris with ``iris k8s manifests``.

``start_control_plane(options)`` returns a ``ControlPlane`` whose ``state.json`` in the run folder
lets another process (``scripts/k8s-control-plane down``) stop it.
"""

from __future__ import annotations

import json
import os
import shutil
import ssl
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import httpx
import yaml

from iris.rpc.ports import free_port
from iris.testing.control_plane import kueue_manifests
from iris.testing.control_plane.binaries import read_versions, repo_root, require_binaries
from iris.testing.control_plane.kubeconfig import write_kubeconfig
from iris.testing.control_plane.pki import KUBELET_CLIENT_USER, Pki, generate_pki
from iris.testing.control_plane.processes import (
    StartupError,
    alive,
    launch,
    log_tail,
    stop_group,
    wait_for,
)
from iris.testing.control_plane.real_node import (
    RealNodeState,
    start_real_node,
    stop_real_node,
)
from iris.testing.control_plane.real_node import load_state as load_real_node

STATE_FILE = "state.json"
SERVICE_CIDR = "10.0.0.0/24"
# The objects of `iris k8s manifests` that describe the in-cluster controller: here the
# controller runs as a local process, so they are not applied.
CONTROLLER_KINDS = {"Deployment", "Service", "PersistentVolumeClaim"}
STARTUP_TIMEOUT = float(os.environ.get("IRIS_K8S_STARTUP_TIMEOUT", "180"))


@dataclass(frozen=True)
class ControlPlaneOptions:
    nodes: int = 2
    node_cpu: str = "4"
    node_memory: str = "8Gi"
    namespace: str = "iris"
    local_queue: str = "iris"
    run_dir: Path | None = None  # default: a new temp folder, removed by stop()
    tied_to_parent: bool = False  # components die with the starting process (pytest)
    # A real kubelet + containerd node (real_node.py) beside the ``nodes`` node-agent nodes.
    real_node: bool = False


@dataclass
class ControlPlane:
    """A running control plane; every path is inside ``run_dir``."""

    run_dir: Path
    server_url: str
    ca_cert: Path
    admin_kubeconfig: Path
    controller_kubeconfig: Path
    controller_token: str
    namespace: str
    local_queue: str
    cluster_queue: str
    node_names: list[str]
    bin_dir: Path
    kubelet_port: int
    webhook_port: int
    versions: dict[str, str]
    pids: dict[str, int] = field(default_factory=dict)
    owns_run_dir: bool = True
    ready_seconds: float = 0.0
    real_node: dict[str, Any] | None = None  # RealNodeState of the real kubelet node, if any

    # ----- helpers for tests ----------------------------------------------------------------------

    def admin_client(self, timeout: float = 30.0) -> httpx.Client:
        pki = self.run_dir / "pki"
        return httpx.Client(
            base_url=self.server_url,
            verify=tls_context(self.ca_cert, pki / "admin.crt", pki / "admin.key"),
            timeout=timeout,
        )

    def kubectl(
        self, *args: str, input: str | None = None, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        """Run kubectl as the cluster admin."""
        return subprocess.run(
            [kubectl_path(), "--kubeconfig", str(self.admin_kubeconfig), *args],
            input=input,
            capture_output=True,
            text=True,
            check=check,
            timeout=120,
        )

    @property
    def audit_log(self) -> Path:
        """JSON lines, one per request of the controller's service account (ResponseComplete)."""
        return self.run_dir / "logs" / "audit.log"

    def log_tail(self, component: str, lines: int = 40) -> str:
        return log_tail(self.run_dir / "logs", component, lines)

    # ----- lifecycle ------------------------------------------------------------------------------

    def save(self) -> None:
        data = {k: (str(v) if isinstance(v, Path) else v) for k, v in asdict(self).items()}
        path = self.run_dir / STATE_FILE
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(data, indent=2))
        tmp.replace(path)

    @classmethod
    def load(cls, run_dir: Path) -> ControlPlane:
        data = json.loads((run_dir / STATE_FILE).read_text())
        for name in ("run_dir", "ca_cert", "admin_kubeconfig", "controller_kubeconfig", "bin_dir"):
            data[name] = Path(data[name])
        return cls(**data)

    @property
    def real_node_name(self) -> str | None:
        return str(self.real_node["name"]) if self.real_node else None

    def stop(self) -> None:
        """Stop every component (the real node and the node agent first, etcd last) and remove
        the run folder."""
        if self.real_node:
            stop_real_node(RealNodeState(**self.real_node))
        for name in reversed(list(self.pids)):
            stop_group(self.pids[name], grace=10.0)
        if self.owns_run_dir:
            shutil.rmtree(self.run_dir, ignore_errors=True)


def tls_context(ca: Path, cert: Path | None = None, key: Path | None = None) -> ssl.SSLContext:
    """Verify against ``ca``; present ``cert``/``key`` (httpx's ``cert=`` argument is not used)."""
    context = ssl.create_default_context(cafile=str(ca))
    if cert is not None and key is not None:
        context.load_cert_chain(str(cert), str(key))
    return context


def kubectl_path() -> str:
    found = shutil.which("kubectl")
    if found is None:
        raise StartupError("kubectl is not installed (apt-get install kubectl)")
    return found


class _Starter:
    """Builds a ControlPlane step by step; on any failure, stops what was started."""

    def __init__(self, options: ControlPlaneOptions) -> None:
        self.options = options
        self.bin_dir = require_binaries()
        root = repo_root()
        self.tools_dir = root / "tools" / "k8s" / "kueue" if root else None
        self.versions = read_versions(root) if root else None
        if options.run_dir is None:
            self.run_dir = Path(tempfile.mkdtemp(prefix="iris-k8s-"))
            self.owns_run_dir = True
        else:
            self.run_dir = Path(options.run_dir)
            self.run_dir.mkdir(parents=True, exist_ok=True)
            self.owns_run_dir = False
        self.log_dir = self.run_dir / "logs"
        self.pids: dict[str, int] = {}
        self.procs: dict[str, subprocess.Popen[bytes]] = {}

    # ----- process plumbing -----------------------------------------------------------------------

    def _launch(self, name: str, argv: list[str], env: dict[str, str] | None = None) -> None:
        proc = launch(
            name, argv, self.log_dir, env=env, cwd=self.run_dir, tied_to_parent=self.options.tied_to_parent
        )
        self.procs[name] = proc
        self.pids[name] = proc.pid
        self._write_partial_state()

    def _write_partial_state(self) -> None:
        """Enough for ``down`` to clean up even if start-up fails half way."""
        (self.run_dir / STATE_FILE).write_text(
            json.dumps({"run_dir": str(self.run_dir), "pids": self.pids, "partial": True})
        )

    def _check_alive(self) -> None:
        for name, proc in self.procs.items():
            if proc.poll() is not None:
                raise StartupError(
                    f"{name} exited with code {proc.returncode} during start-up; its log ends:\n"
                    + log_tail(self.log_dir, name)
                )

    def _wait(self, condition: Any, what: str, timeout: float = STARTUP_TIMEOUT) -> Any:
        return wait_for(condition, timeout=timeout, what=what, check_alive=self._check_alive)

    def abort(self) -> None:
        if getattr(self, "real_node", None) is not None:
            stop_real_node(self.real_node)
        for name in reversed(list(self.pids)):
            stop_group(self.pids[name], grace=5.0)
        if self.owns_run_dir:
            shutil.rmtree(self.run_dir, ignore_errors=True)

    # ----- the steps ------------------------------------------------------------------------------

    def start(self) -> ControlPlane:
        started = time.monotonic()
        self.pki = generate_pki(self.run_dir / "pki")
        self._start_etcd()
        self._start_apiserver()
        self._install_kueue_resources()
        self._start_controllers()
        self._start_kueue()
        self.kubelet_port = 0
        self.node_names: list[str] = []
        if self.options.nodes > 0:
            self._start_node_agent()
        self.real_node: RealNodeState | None = None
        if self.options.real_node:
            self._start_real_node()
        self._wait(self._nodes_ready, "nodes Ready and untainted")
        cp = self._install_iris()
        cp.ready_seconds = round(time.monotonic() - started, 1)
        cp.save()
        return cp

    def _start_etcd(self) -> None:
        client, peer = free_port(), free_port()
        self.etcd_url = f"http://127.0.0.1:{client}"
        data = self.run_dir / "etcd"
        self._launch(
            "etcd",
            [
                str(self.bin_dir / "etcd"),
                "--name=default",
                f"--data-dir={data}",
                f"--listen-client-urls={self.etcd_url}",
                f"--advertise-client-urls={self.etcd_url}",
                f"--listen-peer-urls=http://127.0.0.1:{peer}",
                f"--initial-advertise-peer-urls=http://127.0.0.1:{peer}",
                f"--initial-cluster=default=http://127.0.0.1:{peer}",
                "--unsafe-no-fsync",  # a throw-away test store
                "--log-level=warn",
            ],
        )

        def healthy() -> bool:
            return httpx.get(f"{self.etcd_url}/health", timeout=2).json().get("health") == "true"

        self._wait(healthy, "etcd /health")

    def _start_apiserver(self) -> None:
        pki: Pki = self.pki
        port = free_port()
        self.server_url = f"https://127.0.0.1:{port}"
        # Audit the controller's service account only: benchmarks and tests count its API writes.
        controller_user = f"system:serviceaccount:{self.options.namespace}:iris-controller"
        policy = self.run_dir / "audit-policy.yaml"
        policy.write_text(
            yaml.safe_dump(
                {
                    "apiVersion": "audit.k8s.io/v1",
                    "kind": "Policy",
                    "omitStages": ["RequestReceived"],
                    "rules": [{"level": "Metadata", "users": [controller_user]}, {"level": "None"}],
                }
            )
        )
        self._launch(
            "kube-apiserver",
            [
                str(self.bin_dir / "kube-apiserver"),
                f"--etcd-servers={self.etcd_url}",
                "--bind-address=127.0.0.1",
                "--advertise-address=127.0.0.1",
                f"--secure-port={port}",
                f"--tls-cert-file={pki.apiserver.cert}",
                f"--tls-private-key-file={pki.apiserver.key}",
                f"--client-ca-file={pki.ca.cert}",
                f"--service-account-key-file={pki.sa_public_key}",
                f"--service-account-signing-key-file={pki.sa_private_key}",
                "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
                f"--service-cluster-ip-range={SERVICE_CIDR}",
                "--authorization-mode=Node,RBAC",
                "--enable-admission-plugins=NamespaceLifecycle,ServiceAccount,Priority,NodeRestriction,"
                "DefaultTolerationSeconds,ResourceQuota,MutatingAdmissionWebhook,ValidatingAdmissionWebhook",
                f"--kubelet-client-certificate={pki.kubelet_client.cert}",
                f"--kubelet-client-key={pki.kubelet_client.key}",
                f"--kubelet-certificate-authority={pki.ca.cert}",
                "--kubelet-preferred-address-types=InternalIP",
                "--endpoint-reconciler-type=none",  # a loopback address cannot be an Endpoints address
                "--allow-privileged=true",
                f"--cert-dir={self.run_dir / 'apiserver-certs'}",
                "--profiling=false",
                f"--audit-policy-file={policy}",
                f"--audit-log-path={self.run_dir / 'logs' / 'audit.log'}",
            ],
        )
        self.admin_kubeconfig = write_kubeconfig(
            self.run_dir / "admin.kubeconfig",
            server=self.server_url,
            ca_cert=pki.ca.cert,
            user="iris-admin",
            client_cert=pki.admin.cert,
            client_key=pki.admin.key,
        )
        self.client = httpx.Client(
            base_url=self.server_url,
            verify=tls_context(pki.ca.cert, pki.admin.cert, pki.admin.key),
            timeout=30,
        )
        self._wait(lambda: self.client.get("/readyz").text == "ok", "kube-apiserver /readyz")
        self._authorize_kubelet_client()

    def _authorize_kubelet_client(self) -> None:
        """Bind the API server's kubelet client user to ``system:kubelet-api-admin`` (nodes/proxy,
        nodes/log, nodes/stats, ...): a real kubelet (Webhook authorization) asks the API server
        whether its caller may, so exec and logs through the API server need this binding."""
        binding = {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": "iris:kube-apiserver-kubelet-client"},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": "system:kubelet-api-admin",
            },
            "subjects": [
                {"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": KUBELET_CLIENT_USER}
            ],
        }
        response = self.client.post("/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", json=binding)
        if response.status_code not in (201, 409):
            raise StartupError(
                f"binding the kubelet client user failed: {response.status_code} {response.text[:300]}"
            )

    def _kubectl(self, *args: str, input: str | None = None) -> str:
        result = subprocess.run(
            [kubectl_path(), "--kubeconfig", str(self.admin_kubeconfig), *args],
            input=input,
            capture_output=True,
            text=True,
            timeout=120,
        )
        if result.returncode != 0:
            raise StartupError(f"kubectl {' '.join(args[:3])} failed: {result.stderr.strip()}")
        return result.stdout

    def _install_kueue_resources(self) -> None:
        version = self.versions.kueue if self.versions else "v0.17.0"
        kueue_dir = kueue_manifests.module_dir(version, self.tools_dir)
        self.webhook_port = free_port()
        crds = kueue_manifests.crds(kueue_dir, self.webhook_port, self.pki.ca.cert)
        path = self.run_dir / "kueue-crds.yaml"
        path.write_text(yaml.dump_all(crds, Dumper=yaml.CSafeDumper, sort_keys=False))
        # Server-side apply: the Workload CRD is too large for the last-applied annotation.
        self._kubectl("apply", "--server-side", "-f", str(path))
        names = [crd["metadata"]["name"] for crd in crds]

        def established() -> bool:
            for name in names:
                response = self.client.get(f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}")
                if response.status_code != 200:
                    raise RuntimeError(f"CRD {name}: {response.status_code} {response.text[:300]}")
                crd = response.json()
                conditions = {
                    c["type"]: c["status"] for c in (crd.get("status") or {}).get("conditions") or []
                }
                if conditions.get("Established") != "True":
                    return False
            return True

        self._wait(established, "Kueue CRDs Established")
        self._kubectl("create", "namespace", kueue_manifests.KUEUE_NAMESPACE)
        webhooks = kueue_manifests.webhook_configurations(kueue_dir, self.webhook_port, self.pki.ca.cert)
        path = self.run_dir / "kueue-webhooks.yaml"
        path.write_text(yaml.safe_dump_all(webhooks, sort_keys=False))
        self._kubectl("apply", "-f", str(path))

    def _start_controllers(self) -> None:
        pki = self.pki
        kcm_port, scheduler_port = free_port(), free_port()
        self._launch(
            "kube-controller-manager",
            [
                str(self.bin_dir / "kube-controller-manager"),
                f"--kubeconfig={self.admin_kubeconfig}",
                f"--authentication-kubeconfig={self.admin_kubeconfig}",
                f"--authorization-kubeconfig={self.admin_kubeconfig}",
                "--bind-address=127.0.0.1",
                f"--secure-port={kcm_port}",
                f"--cert-dir={self.run_dir / 'kcm-certs'}",
                "--leader-elect=false",
                "--controllers=*",
                "--use-service-account-credentials=true",
                f"--root-ca-file={pki.ca.cert}",
                f"--service-account-private-key-file={pki.sa_private_key}",
                f"--cluster-signing-cert-file={pki.ca.cert}",
                f"--cluster-signing-key-file={pki.ca.key}",
                f"--service-cluster-ip-range={SERVICE_CIDR}",
                "--terminated-pod-gc-threshold=500",
            ],
        )
        self._launch(
            "kube-scheduler",
            [
                str(self.bin_dir / "kube-scheduler"),
                f"--kubeconfig={self.admin_kubeconfig}",
                f"--authentication-kubeconfig={self.admin_kubeconfig}",
                f"--authorization-kubeconfig={self.admin_kubeconfig}",
                "--bind-address=127.0.0.1",
                f"--secure-port={scheduler_port}",
                "--leader-elect=false",
            ],
        )
        for name, port in (("kube-controller-manager", kcm_port), ("kube-scheduler", scheduler_port)):
            self._wait(
                lambda port=port: (
                    httpx.get(f"https://127.0.0.1:{port}/healthz", verify=False, timeout=2).text == "ok"
                ),
                f"{name} /healthz",
            )

    def _start_kueue(self) -> None:
        pki = self.pki
        cert_dir = self.run_dir / "kueue-certs"
        cert_dir.mkdir(exist_ok=True)
        shutil.copy(pki.webhook.cert, cert_dir / "tls.crt")
        shutil.copy(pki.webhook.key, cert_dir / "tls.key")
        health_port, metrics_port = free_port(), free_port()
        config = kueue_manifests.manager_configuration(
            webhook_port=self.webhook_port,
            cert_dir=cert_dir,
            health_port=health_port,
            metrics_port=metrics_port,
        )
        config_path = self.run_dir / "kueue-config.yaml"
        config_path.write_text(yaml.safe_dump(config, sort_keys=False))
        kueue = [
            str(self.bin_dir / "kueue"),
            f"--config={config_path}",
            # The visibility API server needs certificates at the fixed path /visibility; Iris
            # does not use that API.
            "--feature-gates=VisibilityOnDemand=false",
            "--zap-log-level=info",
        ]
        # Without internal cert management Kueue reads its metrics certificate from the fixed
        # path /etc/kueue/metrics/certs: give it ours there, in a private mount namespace.
        mount_point = "/etc/kueue/metrics/certs"
        script = f'mkdir -p {mount_point} && mount --bind "$0" {mount_point} && exec "$@"'
        unshare = ["unshare", "--mount", "--propagation", "private"]
        if os.geteuid() != 0:
            unshare.insert(1, "--map-root-user")
        env = {**os.environ, "KUBECONFIG": str(self.admin_kubeconfig)}
        self._launch("kueue", [*unshare, "sh", "-c", script, str(cert_dir), *kueue], env=env)
        self._wait(
            lambda: httpx.get(f"http://127.0.0.1:{health_port}/readyz", timeout=2).status_code == 200,
            "Kueue /readyz",
        )

    def _start_node_agent(self) -> None:
        pki = self.pki
        self.kubelet_port = free_port()
        self.node_names = [f"iris-node-{i}" for i in range(self.options.nodes)]
        argv = [
            sys.executable,
            "-m",
            "iris.testing.kubelet_sim.node_agent",
            f"--kubeconfig={self.admin_kubeconfig}",
            f"--port={self.kubelet_port}",
            f"--serving-cert={pki.kubelet_serving.cert}",
            f"--serving-key={pki.kubelet_serving.key}",
            f"--client-ca={pki.ca.cert}",
            f"--work-dir={self.run_dir / 'node-agent'}",
            f"--cpu={self.options.node_cpu}",
            f"--memory={self.options.node_memory}",
        ]
        for name in self.node_names:
            argv.append(f"--node={name}")
        self._launch("node-agent", argv)

    def _start_real_node(self) -> None:
        def track(name: str, proc: subprocess.Popen[bytes]) -> None:
            self.procs[name] = proc

        self.real_node = start_real_node(
            self.run_dir,
            self.pki,
            self.server_url,
            self.bin_dir,
            tied_to_parent=self.options.tied_to_parent,
            on_launch=track,
        )
        self.node_names.append(self.real_node.name)

    def _nodes_ready(self) -> bool:
        items = self.client.get("/api/v1/nodes").json().get("items") or []
        ready = {
            n["metadata"]["name"]
            for n in items
            if any(
                c["type"] == "Ready" and c["status"] == "True" for c in n["status"].get("conditions") or []
            )
            and not any(t.get("key") == "node.kubernetes.io/not-ready" for t in n["spec"].get("taints") or [])
        }
        return set(self.node_names) <= ready

    def _install_iris(self) -> ControlPlane:
        options = self.options
        # The real node counts with the machine's CPUs (what its kubelet reports) and one node's memory.
        real_cpu = (os.cpu_count() or 1) if options.real_node else 0
        quota_cpu = (
            str(int(options.node_cpu) * options.nodes + real_cpu)
            if options.node_cpu.isdigit()
            else options.node_cpu
        )
        memory_quota = _scale_quantity(options.node_memory, options.nodes + int(options.real_node))
        iris = shutil.which("iris", path=str(Path(sys.executable).parent)) or shutil.which("iris")
        if iris is None:
            raise StartupError("the iris command is not on PATH (uv sync)")
        rendered = subprocess.run(
            [iris, "k8s", "manifests", "--namespace", options.namespace, "--queue", options.local_queue,
             "--cpu-quota", quota_cpu, "--memory-quota", memory_quota],
            capture_output=True, text=True, check=False, timeout=60,
        )  # fmt: skip
        if rendered.returncode != 0:
            raise StartupError(f"iris k8s manifests failed: {rendered.stderr.strip()}")
        docs = [d for d in yaml.safe_load_all(rendered.stdout) if d and d.get("kind") not in CONTROLLER_KINDS]
        cluster_queue = next(d["metadata"]["name"] for d in docs if d["kind"] == "ClusterQueue")
        path = self.run_dir / "iris-manifests.yaml"
        path.write_text(yaml.safe_dump_all(docs, sort_keys=False))
        # Kueue's webhooks may still be warming up: apply until they answer.
        self._wait(lambda: self._try_apply(path), "iris k8s manifests applied (Kueue webhooks answering)")
        ns = options.namespace

        def default_service_account() -> bool:
            return self.client.get(f"/api/v1/namespaces/{ns}/serviceaccounts/default").status_code == 200

        self._wait(default_service_account, f"the default ServiceAccount in {ns}")

        def cluster_queue_active() -> bool:
            cq = self.client.get(f"/apis/kueue.x-k8s.io/v1beta2/clusterqueues/{cluster_queue}").json()
            conditions = (cq.get("status") or {}).get("conditions") or []
            return any(c["type"] == "Active" and c["status"] == "True" for c in conditions)

        self._wait(cluster_queue_active, f"ClusterQueue {cluster_queue} Active")
        self._wait(
            lambda: self._dry_run_queued_pod(ns, options.local_queue), "Kueue's pod webhook gating a pod"
        )
        token = self._kubectl("create", "token", "iris-controller", "-n", ns, "--duration=24h").strip()
        controller_kubeconfig = write_kubeconfig(
            self.run_dir / "controller.kubeconfig",
            server=self.server_url,
            ca_cert=self.pki.ca.cert,
            user="iris-controller",
            token=token,
            namespace=ns,
        )
        versions = self.versions
        return ControlPlane(
            run_dir=self.run_dir,
            server_url=self.server_url,
            ca_cert=self.pki.ca.cert,
            admin_kubeconfig=self.admin_kubeconfig,
            controller_kubeconfig=controller_kubeconfig,
            controller_token=token,
            namespace=ns,
            local_queue=options.local_queue,
            cluster_queue=cluster_queue,
            node_names=self.node_names,
            bin_dir=self.bin_dir,
            kubelet_port=self.kubelet_port,
            webhook_port=self.webhook_port,
            versions=(
                {"kubernetes": versions.kubernetes, "kueue": versions.kueue, "etcd": versions.etcd}
                if versions
                else {}
            ),
            pids=dict(self.pids),
            owns_run_dir=self.owns_run_dir,
            real_node=asdict(self.real_node) if self.real_node else None,
        )

    def _try_apply(self, path: Path) -> bool:
        result = subprocess.run(
            [kubectl_path(), "--kubeconfig", str(self.admin_kubeconfig), "apply", "-f", str(path)],
            capture_output=True,
            text=True,
            timeout=120,
        )
        if result.returncode != 0:
            raise RuntimeError(result.stderr.strip()[-500:])
        return True

    def _dry_run_queued_pod(self, namespace: str, queue: str) -> bool:
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "iris-readiness-probe", "labels": {"kueue.x-k8s.io/queue-name": queue}},
            "spec": {
                "containers": [
                    {"name": "probe", "image": "busybox", "resources": {"requests": {"cpu": "1m"}}}
                ]
            },
        }
        response = self.client.post(
            f"/api/v1/namespaces/{namespace}/pods", params={"dryRun": "All"}, json=pod
        )
        if response.status_code != 201:
            raise RuntimeError(f"dry-run pod create: {response.status_code} {response.text[:300]}")
        gates = [g["name"] for g in response.json()["spec"].get("schedulingGates") or []]
        return "kueue.x-k8s.io/admission" in gates


def _scale_quantity(quantity: str, factor: int) -> str:
    digits = "".join(ch for ch in quantity if ch.isdigit())
    suffix = quantity[len(digits) :]
    return f"{int(digits) * factor}{suffix}" if digits else quantity


def start_control_plane(options: ControlPlaneOptions | None = None) -> ControlPlane:
    """Start everything and wait until it is ready; on failure nothing is left running."""
    starter = _Starter(options or ControlPlaneOptions())
    try:
        return starter.start()
    except BaseException:
        starter.abort()
        raise


def stop_run_dir(run_dir: Path) -> bool:
    """Stop the control plane recorded in ``run_dir/state.json``; False if there is none."""
    state = run_dir / STATE_FILE
    if not state.is_file():
        node = load_real_node(run_dir)
        if node is not None:
            stop_real_node(node)
        return False
    data = json.loads(state.read_text())
    node = load_real_node(run_dir)
    if node is not None:
        stop_real_node(node)
    pids: dict[str, int] = data.get("pids") or {}
    for name in reversed(list(pids)):
        if alive(pids[name]):
            stop_group(pids[name], grace=10.0)
    shutil.rmtree(run_dir, ignore_errors=True)
    return True
