"""kubeconfig files for the local control plane: admin (client certificate) and token users."""

from __future__ import annotations

import base64
from pathlib import Path

import yaml


def _b64(path: Path) -> str:
    return base64.b64encode(path.read_bytes()).decode()


def write_kubeconfig(
    path: Path,
    *,
    server: str,
    ca_cert: Path,
    user: str,
    client_cert: Path | None = None,
    client_key: Path | None = None,
    token: str | None = None,
    namespace: str = "default",
) -> Path:
    credentials: dict[str, str] = {}
    if client_cert is not None and client_key is not None:
        credentials = {"client-certificate-data": _b64(client_cert), "client-key-data": _b64(client_key)}
    if token is not None:
        credentials["token"] = token
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {"name": "iris-local", "cluster": {"server": server, "certificate-authority-data": _b64(ca_cert)}}
        ],
        "users": [{"name": user, "user": credentials}],
        "contexts": [
            {"name": user, "context": {"cluster": "iris-local", "user": user, "namespace": namespace}}
        ],
        "current-context": user,
    }
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    path.chmod(0o600)
    return path
