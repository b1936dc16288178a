"""A throw-away CA and server certificate for 127.0.0.1, made with the ``openssl`` CLI.

kubectl (client-go) only sends bearer tokens over TLS, so a token-protected fake server must
speak HTTPS; the CA goes into the kubeconfig as ``certificate-authority-data``.
"""

from __future__ import annotations

import ssl
import subprocess
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class TlsMaterial:
    ca_cert: Path
    server_cert: Path
    server_key: Path

    def ca_pem(self) -> str:
        return self.ca_cert.read_text()

    def server_context(self) -> ssl.SSLContext:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(self.server_cert, self.server_key)
        return context


def _openssl(*args: str) -> None:
    result = subprocess.run(["openssl", *args], capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise RuntimeError(f"openssl {args[0]} failed: {result.stderr.strip()}")


def generate_tls_material(directory: Path) -> TlsMaterial:
    """Create ca.crt, server.crt (SAN 127.0.0.1, localhost) and server.key in ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    ca_key, ca_cert = directory / "ca.key", directory / "ca.crt"
    key, csr, cert = directory / "server.key", directory / "server.csr", directory / "server.crt"
    ext = directory / "server.ext"
    ec = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes")
    _openssl("req", "-x509", *ec, "-days", "30", "-subj", "/CN=iris-fake-apiserver-ca",
             "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign",
             "-keyout", str(ca_key), "-out", str(ca_cert))  # fmt: skip
    _openssl("req", "-new", *ec, "-subj", "/CN=iris-fake-apiserver", "-keyout", str(key), "-out", str(csr))
    ext.write_text(
        "basicConstraints=critical,CA:FALSE\n"
        "keyUsage=critical,digitalSignature,keyEncipherment\n"
        "extendedKeyUsage=serverAuth\n"
        "subjectAltName=IP:127.0.0.1,DNS:localhost\n"
    )
    _openssl("x509", "-req", "-in", str(csr), "-CA", str(ca_cert), "-CAkey", str(ca_key), "-CAcreateserial",
             "-days", "30", "-extfile", str(ext), "-out", str(cert))  # fmt: skip
    for path in (ca_key, key):
        path.chmod(0o600)
    return TlsMaterial(ca_cert, cert, key)
