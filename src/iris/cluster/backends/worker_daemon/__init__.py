"""The WORKER backend: Reconcile RPC fan-out and attempt RPCs against worker daemons."""

from iris.cluster.backends.worker_daemon.backend import WorkerDaemonBackend
from iris.cluster.backends.worker_daemon.client import ReconcileOutcome, WorkerRpcClient

__all__ = ["ReconcileOutcome", "WorkerDaemonBackend", "WorkerRpcClient"]
