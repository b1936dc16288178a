"""The WORKER backend's transport: Reconcile RPC fan-out and log reads against worker daemons."""

from iris.cluster.backends.worker_daemon.client import ReconcileOutcome, WorkerRpcClient

__all__ = ["ReconcileOutcome", "WorkerRpcClient"]
