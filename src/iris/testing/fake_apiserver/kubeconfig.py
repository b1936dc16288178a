"""Writing a kubeconfig that points kubectl and client libraries at a server."""

from __future__ import annotations

import base64
from pathlib import Path

import yaml


def write_kubeconfig(
    path: Path,
    server_url: str,
    token: str | None,
    namespace: str = "default",
    *,
    certificate_authority_pem: str | None = None,
) -> Path:
    """Write a one-context kubeconfig (context and cluster named ``iris-fake``) and return its path.

    For an https server pass the CA that signed its certificate (kubectl sends tokens only over TLS).
    """
    user: dict[str, str] = {"token": token} if token else {}
    cluster: dict[str, str] = {"server": server_url}
    if certificate_authority_pem:
        cluster["certificate-authority-data"] = base64.b64encode(certificate_authority_pem.encode()).decode()
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "iris-fake", "cluster": cluster}],
        "users": [{"name": "iris-fake", "user": user}],
        "contexts": [
            {
                "name": "iris-fake",
                "context": {"cluster": "iris-fake", "user": "iris-fake", "namespace": namespace},
            }
        ],
        "current-context": "iris-fake",
        "preferences": {},
    }
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    path.chmod(0o600)
    return path
