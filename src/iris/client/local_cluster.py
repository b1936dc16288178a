"""An embedded cluster on this machine: a controller and N worker daemons as real processes."""

from __future__ import annotations

import ctypes
import json
import os
import secrets
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from iris.cluster.worker.devices import split_gpus
from iris.rpc.errors import Unavailable
from iris.rpc.ports import free_port

_PR_SET_PDEATHSIG = 1


def _stop_with_parent() -> None:
    """In the child, before exec: SIGTERM when the process that started it dies, however it dies
    (kill -9 of ``iris cluster start`` must not leave a controller, workers or a control plane)."""
    ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)


@dataclass
class _Child:
    name: str
    proc: subprocess.Popen[bytes]
    log_path: Path
    log_file: IO[bytes] = field(repr=False)


# --backend kubernetes without a kubeconfig: node-agent nodes of the local control plane, and how
# long it may take to come up (a first run builds it: minutes; the child fails fast otherwise).
K8S_LOCAL_NODES = 2
K8S_START_TIMEOUT_S = 3600.0


def _wait_for_file(
    path: Path, proc: subprocess.Popen[bytes], what: str, log_path: Path, timeout_s: float
) -> dict[str, object]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if path.exists():
            return json.loads(path.read_text())
        if proc.poll() is not None:
            tail = log_path.read_text(errors="replace")[-2000:] if log_path.exists() else ""
            raise Unavailable(f"the {what} exited with code {proc.returncode} while starting:\n{tail}")
        time.sleep(0.02)
    raise Unavailable(f"the {what} did not start within {timeout_s:.0f}s (log: {log_path})")


class LocalCluster:
    """Start with ``start()`` (or as a context manager); ``url`` is the controller's address."""

    def __init__(
        self,
        *,
        workers: int = 2,
        state_dir: str | Path | None = None,
        port: int = 0,
        host: str = "127.0.0.1",
        worker_cpu: str | None = None,
        worker_memory: str | None = None,
        worker_attributes: list[dict[str, str]] | None = None,
        backend: str = "worker",
        tick_s: float = 1.0,
        worker_grace_s: float = 10.0,
        controller_args: list[str] | None = None,
        token: str | None = None,
        worker_token: str | None = None,
        kubeconfig: str | Path | None = None,
        namespace: str = "iris",
        local_queue: str = "iris",
        one_time_token: bool = False,
        real_node: str = "no",
        pod_host: str | None = None,
    ) -> None:
        """``token``: when the controller requires one (a config with ``auth``), an admin token for
        the launcher's own checks; the workers it starts authenticate with ``worker_token``.

        ``kubeconfig`` (kubernetes backend): run against that cluster, in ``namespace`` with Kueue
        LocalQueue ``local_queue`` (installed by ``iris k8s manifests``); without it the backend
        runs against a real control plane of its own (from the cache of
        ``scripts/k8s-control-plane build``, built first if missing) with node-agent nodes.

        ``one_time_token`` (with no ``token`` given): the controller requires a token made up now,
        ``self.token`` (admin, as the current user; the dashboard URL carries it), and its workers
        another; a web page the user opens cannot drive the cluster.

        ``pod_host`` (kubernetes backend, needs a token): the controller also listens on this
        address, on the same port, and pods get it as their controller URL: the host end of a
        local real node's veth, which its pods reach (bundles, callables' results, gangs); callables'
        pods mount this machine's ``iris`` and ``cloudpickle`` (``host_runner``), so the node must be
        this machine. Without a kubeconfig it is the local plane's real node's, when the machine runs
        one and the cluster has a token."""
        self._tmp = None if state_dir is not None else tempfile.TemporaryDirectory(prefix="iris-local-")
        self.state_dir = Path(state_dir) if state_dir is not None else Path(self._tmp.name)  # type: ignore[union-attr]
        self.num_workers = workers
        self.port = port
        self.host = host
        self.worker_cpu = worker_cpu
        self.worker_memory = worker_memory
        self.worker_attributes = worker_attributes or []
        self.backend = backend
        self.tick_s = tick_s
        self.worker_grace_s = worker_grace_s
        self.controller_args = controller_args or []
        self.token = token
        self.worker_token = worker_token
        self._controller_env: dict[str, str] = {}
        if one_time_token and token is None:
            from iris.client.client import default_user

            self.token = secrets.token_urlsafe(24)
            self.worker_token = worker_token or secrets.token_urlsafe(24)
            self._controller_env = {
                "IRIS_CONTROLLER_LOCAL_TOKEN": self.token,
                "IRIS_CONTROLLER_LOCAL_USER": default_user(),
                "IRIS_CONTROLLER_LOCAL_WORKER_TOKEN": self.worker_token,
            }
        self.kubeconfig = Path(kubeconfig) if kubeconfig is not None else None
        self.namespace = namespace
        self.local_queue = local_queue
        # kubernetes backend without a kubeconfig: a real kubelet + containerd node ("yes"), the
        # node agents ("no"), or the first when this machine allows it ("auto").
        self.real_node = real_node
        self.pod_host = pod_host
        self.url = ""
        self.ready_info: dict[str, object] = {}
        self.controller: _Child | None = None
        self.control_plane: _Child | None = None
        self.workers: list[_Child] = []
        self._gpu_shares: list[str] | None = None
        self._controller_argv: list[str] = []
        self._worker_launch: dict[str, tuple[list[str], dict[str, str] | None, Path]] = {}

    @property
    def dashboard_url(self) -> str:
        """The dashboard's address; with a one-time token, the URL that hands it to the browser."""
        return f"{self.url}/?token={self.token}" if self._controller_env else f"{self.url}/"

    def __enter__(self) -> LocalCluster:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _spawn(self, name: str, argv: list[str], env: dict[str, str] | None = None) -> _Child:
        logs = self.state_dir / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        log_path = logs / f"{name}.log"
        log_file = open(log_path, "ab")  # noqa: SIM115 - kept open for the child's lifetime
        env = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
        proc = subprocess.Popen(
            argv,
            stdout=log_file,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            start_new_session=True,
            # The death signal follows the *thread* that forked: tie only children of the main thread.
            preexec_fn=_stop_with_parent if threading.current_thread() is threading.main_thread() else None,
        )
        return _Child(name, proc, log_path, log_file)

    def start(self, timeout_s: float = 60.0) -> None:
        self.state_dir.mkdir(parents=True, exist_ok=True)
        ready = self.state_dir / "controller.ready"
        ready.unlink(missing_ok=True)
        # Knowing the port up front lets the workers start alongside the controller: they keep
        # trying to register until it answers.
        port = self.port or free_port(self.host)
        self.url = f"http://{self.host}:{port}"
        argv = [
            sys.executable, "-m", "iris.cluster.controller",
            "--host", self.host, "--port", str(port),
            "--state-dir", str(self.state_dir / "controller"),
            "--ready-file", str(ready), "--backend", self.backend,
            "--tick", str(self.tick_s), "--worker-grace", str(self.worker_grace_s),
            "--terminate-slices-on-exit",
            *self.controller_args,
        ]  # fmt: skip
        try:
            if self.backend == "kubernetes" and self.kubeconfig is not None:
                argv += ["--kubeconfig", str(self.kubeconfig), "--namespace", self.namespace]
                argv += ["--queue", self.local_queue]
                self.ready_info.update({"kubeconfig": str(self.kubeconfig), "namespace": self.namespace})
            elif self.backend == "kubernetes":
                argv += self._start_k8s_control_plane(timeout_s)
            if self.backend == "kubernetes" and self.pod_host:
                argv += ["--also-listen", self.pod_host, "--advertise-url", f"http://{self.pod_host}:{port}"]
                argv += ["--host-runner"]  # the node is this machine: callables use our iris
                self.ready_info["pod_controller_url"] = f"http://{self.pod_host}:{port}"
            self._controller_argv = argv
            self.controller = self._spawn("controller", argv, self._controller_env or None)
            if self.backend == "worker":
                for i in range(self.num_workers):
                    self.add_worker(i, wait=False)
            info = _wait_for_file(
                ready, self.controller.proc, "controller", self.controller.log_path, timeout_s
            )
            self.ready_info.update(info)
            self.url = str(self.ready_info["url"])
            if self.backend == "worker":
                self.wait_for_workers(self.num_workers, timeout_s)
        except BaseException:
            self.stop()
            raise

    def _start_k8s_control_plane(self, timeout_s: float) -> list[str]:
        """The kubernetes backend runs against a real control plane of its own (etcd, kube-apiserver,
        scheduler, controller-manager, Kueue; built into the cache first if missing) whose pods
        run on node-agent nodes, started in the foreground of a child process."""
        ready = self.state_dir / "k8s-control-plane.ready"
        ready.unlink(missing_ok=True)
        argv = [
            sys.executable, "-m", "iris.testing.control_plane", "serve",
            "--run-dir", str(self.state_dir / "k8s"), "--ready-file", str(ready),
            "--nodes", str(K8S_LOCAL_NODES), "--real-node", self.real_node,
        ]  # fmt: skip
        self.control_plane = self._spawn("k8s-control-plane", argv)
        # Starting the plane takes seconds to minutes on a loaded machine (longer if it builds).
        info = _wait_for_file(
            ready,
            self.control_plane.proc,
            "kubernetes control plane",
            self.control_plane.log_path,
            max(timeout_s, K8S_START_TIMEOUT_S),
        )
        self.ready_info.update(
            {
                "kubeconfig": info["controller_kubeconfig"],
                "admin_kubeconfig": info["admin_kubeconfig"],
                "k8s_server_url": info["server_url"],
                "namespace": info["namespace"],
                "k8s_nodes": info["node_names"],
                "k8s_runtime": info.get("runtime") or "node agent (pods run as local process groups)",
                "k8s_real_node": info.get("real_node"),
            }
        )
        if info.get("node_ip") and self.pod_host is None and self.token is not None:
            self.pod_host = str(info["node_ip"])  # the real node's pods reach the controller there
        image: list[str] = []
        if info.get("default_image") and "--image" not in self.controller_args:
            image = ["--image", str(info["default_image"])]
        # The nodes' job environments in the state dir, not in /var/cache of this machine.
        envs = ["--environment-dir", str(self.state_dir / "k8s" / "node-envs")]
        return [
            "--kubeconfig", str(info["controller_kubeconfig"]), "--namespace", str(info["namespace"]),
            "--queue", str(info["local_queue"]), *image, *envs,
        ]  # fmt: skip

    def add_worker(
        self,
        index: int | None = None,
        *,
        wait: bool = True,
        attributes: dict[str, str] | None = None,
        host: str | None = None,
        launcher: list[str] | None = None,
        controller_host: str | None = None,
    ) -> _Child:
        """Start worker daemon ``index``; ``host`` is the address it serves on (default: the
        controller's), ``launcher`` a command prefix it runs under (``ip netns exec NAME``) and
        ``controller_host`` the controller's address as the worker reaches it."""
        index = len(self.workers) if index is None else index
        worker_id = f"worker-{index}"
        wdir = self.state_dir / "workers" / worker_id
        ready = wdir / "ready.json"
        wdir.mkdir(parents=True, exist_ok=True)
        ready.unlink(missing_ok=True)
        argv = [
            *(launcher or []), sys.executable, "-m", "iris.cluster.worker",
            "--controller", self._url_from(controller_host), "--host", host or self.host,
            "--worker-id", worker_id,
            "--state-dir", str(wdir), "--ready-file", str(ready),
        ]  # fmt: skip
        if self.worker_cpu:
            argv += ["--cpu", self.worker_cpu]
        if self.worker_memory:
            argv += ["--memory", self.worker_memory]
        attrs = attributes or (self.worker_attributes[index] if index < len(self.worker_attributes) else {})
        for k, v in attrs.items():
            argv += ["--attr", f"{k}={v}"]
        env = {"IRIS_TOKEN": self.worker_token} if self.worker_token else {}
        if self._gpu_shares is None:
            # Local workers share one machine: each offers its own GPUs, never the same ones.
            self._gpu_shares = split_gpus(self.num_workers) or []
        if index < len(self._gpu_shares):
            env["CUDA_VISIBLE_DEVICES"] = self._gpu_shares[index]
        self._worker_launch[worker_id] = (argv, env or None, ready)
        child = self._spawn(worker_id, argv, env or None)
        self.workers.append(child)
        if wait:
            _wait_for_file(ready, child.proc, worker_id, child.log_path, 60)
        return child

    def _url_from(self, controller_host: str | None) -> str:
        if controller_host is None:
            return self.url
        return f"http://{controller_host}:{self.url.rsplit(':', 1)[1]}"

    def restart_controller(self, timeout_s: float = 60.0) -> None:
        """Start the controller again on the same port and state dir (after it died or was killed)."""
        if self.controller is not None:
            self._terminate([self.controller], 10.0)
        ready = self.state_dir / "controller.ready"
        ready.unlink(missing_ok=True)
        self.controller = self._spawn("controller", self._controller_argv, self._controller_env or None)
        _wait_for_file(ready, self.controller.proc, "controller", self.controller.log_path, timeout_s)

    def restart_worker(self, worker_id: str, *, wait: bool = True) -> _Child:
        """Start a worker daemon again with its id and state dir (stopping it first if it runs). A
        daemon that died (``kill -9``) left its container attempts running: the new one adopts them;
        its process attempts were killed by its watchdog."""
        argv, env, ready = self._worker_launch[worker_id]
        old = next(w for w in self.workers if w.name == worker_id)
        self._terminate([old], 10.0)
        ready.unlink(missing_ok=True)
        child = self._spawn(worker_id, argv, env)
        self.workers[self.workers.index(old)] = child
        if wait:
            _wait_for_file(ready, child.proc, worker_id, child.log_path, 60)
        return child

    def wait_for_workers(self, count: int, timeout_s: float = 60.0) -> None:
        from iris.rpc.http import HttpClient

        if count == 0:
            return
        http = HttpClient(self.url, timeout_s=5, token=self.token)
        deadline = time.monotonic() + timeout_s
        try:
            while time.monotonic() < deadline:
                for w in self.workers:
                    if w.proc.poll() is not None:
                        tail = w.log_path.read_text(errors="replace")[-2000:]
                        raise Unavailable(
                            f"{w.name} exited with code {w.proc.returncode} while starting:\n{tail}"
                        )
                data = http.request("GET", "/api/v1/workers")
                if len(data["workers"]) >= count:
                    return
                time.sleep(0.02)
        finally:
            http.close()
        raise Unavailable(
            f"only some of {count} workers registered within {timeout_s:.0f}s (logs: {self.state_dir / 'logs'})"
        )

    def stop(self, timeout_s: float = 10.0) -> None:
        # Workers and controller first; the control plane (whose node agents own pod processes) last.
        children = [*self.workers, *([self.controller] if self.controller else [])]
        self._terminate(children, timeout_s)
        if self.control_plane is not None:
            # It stops its components (up to 10 s each) before it exits.
            self._terminate([self.control_plane], max(timeout_s, 60.0))
        self.workers = []
        self.controller = None
        self.control_plane = None
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None

    @staticmethod
    def _terminate(children: list[_Child], timeout_s: float) -> None:
        for child in children:
            if child.proc.poll() is None:
                try:
                    os.killpg(child.proc.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
        deadline = time.monotonic() + timeout_s
        for child in children:
            try:
                child.proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                try:
                    os.killpg(child.proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                child.proc.wait()
            child.log_file.close()


def machine_share(workers: int) -> tuple[str, str]:
    """This machine's cpus and memory divided among ``workers`` (as ``--cpu``/``--memory`` values),
    so local workers together offer the machine once rather than each offering all of it."""
    import psutil

    n = max(1, workers)
    millicores = max(100, (os.cpu_count() or 1) * 1000 // n)
    memory = max(256 * 1000**2, psutil.virtual_memory().total // n)
    return f"{millicores}m", f"{memory}B"
