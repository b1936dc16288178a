"""Certificates and keys for a local control plane, made with the ``openssl`` CLI.

One CA signs every certificate: the API server's serving certificate (127.0.0.1), the admin
client (``O=system:masters``), the API server's client for kubelets (``CN=kube-apiserver-kubelet-client``,
no group: RBAC gives it ``system:kubelet-api-admin`` and nothing else), the node agent's kubelet
serving certificate and Kueue's webhook certificate. The service-account signing key pair is
separate, as kube-apiserver requires.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

_EC = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes")
_DAYS = "30"
# The user the API server calls kubelets as (its --kubelet-client-certificate); the control plane
# binds it to the built-in ClusterRole system:kubelet-api-admin, which real kubelets check (Webhook).
KUBELET_CLIENT_USER = "kube-apiserver-kubelet-client"


@dataclass(frozen=True)
class CertPair:
    cert: Path
    key: Path


@dataclass(frozen=True)
class Pki:
    directory: Path
    ca: CertPair
    apiserver: CertPair
    admin: CertPair
    kubelet_client: CertPair
    kubelet_serving: CertPair
    webhook: CertPair
    sa_private_key: Path
    sa_public_key: Path


def _openssl(*args: str) -> None:
    result = subprocess.run(["openssl", *args], capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise RuntimeError(f"openssl {args[0]} failed: {result.stderr.strip()}")


def _issue(directory: Path, ca: CertPair, name: str, subject: str, *, server_sans: str = "") -> CertPair:
    key, csr, cert, ext = (directory / f"{name}{suffix}" for suffix in (".key", ".csr", ".crt", ".ext"))
    _openssl("req", "-new", *_EC, "-subj", subject, "-keyout", str(key), "-out", str(csr))
    usage = "serverAuth" if server_sans else "clientAuth"
    lines = [
        "basicConstraints=critical,CA:FALSE",
        "keyUsage=critical,digitalSignature,keyEncipherment",
        f"extendedKeyUsage={usage}",
    ]
    if server_sans:
        lines.append(f"subjectAltName={server_sans}")
    ext.write_text("\n".join(lines) + "\n")
    _openssl("x509", "-req", "-in", str(csr), "-CA", str(ca.cert), "-CAkey", str(ca.key),
             "-CAcreateserial", "-days", _DAYS, "-extfile", str(ext), "-out", str(cert))  # fmt: skip
    csr.unlink()
    ext.unlink()
    key.chmod(0o600)
    return CertPair(cert, key)


def generate_pki(directory: Path) -> Pki:
    directory.mkdir(parents=True, exist_ok=True)
    ca = CertPair(directory / "ca.crt", directory / "ca.key")
    _openssl("req", "-x509", *_EC, "-days", _DAYS, "-subj", "/CN=iris-local-kubernetes-ca",
             "-addext", "basicConstraints=critical,CA:TRUE",
             "-addext", "keyUsage=critical,keyCertSign,cRLSign",
             "-keyout", str(ca.key), "-out", str(ca.cert))  # fmt: skip
    ca.key.chmod(0o600)
    loopback = "IP:127.0.0.1,DNS:localhost"
    apiserver_sans = (
        f"{loopback},IP:10.0.0.1,DNS:kubernetes,DNS:kubernetes.default,"
        "DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local"
    )
    sa_private, sa_public = directory / "sa.key", directory / "sa.pub"
    _openssl("genpkey", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048", "-out", str(sa_private))
    _openssl("pkey", "-in", str(sa_private), "-pubout", "-out", str(sa_public))
    sa_private.chmod(0o600)
    return Pki(
        directory=directory,
        ca=ca,
        apiserver=_issue(directory, ca, "apiserver", "/CN=kube-apiserver", server_sans=apiserver_sans),
        admin=_issue(directory, ca, "admin", "/O=system:masters/CN=iris-admin"),
        kubelet_client=_issue(directory, ca, "apiserver-kubelet-client", f"/CN={KUBELET_CLIENT_USER}"),
        kubelet_serving=_issue(directory, ca, "kubelet", "/CN=iris-node-agent", server_sans=loopback),
        webhook=_issue(directory, ca, "kueue-webhook", "/CN=kueue-webhook", server_sans=loopback),
        sa_private_key=sa_private,
        sa_public_key=sa_public,
    )


def issue_node_certs(directory: Path, ca: CertPair, node: str, node_ip: str) -> tuple[CertPair, CertPair]:
    """A real kubelet's client certificate (``O=system:nodes, CN=system:node:<node>``, which the
    Node authorizer and NodeRestriction expect) and its serving certificate for ``node_ip`` (the
    API server verifies it when it proxies logs and exec)."""
    client = _issue(directory, ca, f"{node}-client", f"/O=system:nodes/CN=system:node:{node}")
    serving = _issue(directory, ca, f"{node}-serving", f"/CN={node}", server_sans=f"IP:{node_ip},DNS:{node}")
    return client, serving


def issue_client_cert(directory: Path, ca: CertPair, name: str, subject: str) -> CertPair:
    """A client certificate signed by ``ca`` (e.g. ``/CN=mallory`` for a user without RBAC rights)."""
    return _issue(directory, ca, name, subject)
