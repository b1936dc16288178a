"""Kueue's CRDs, webhook configurations and manager configuration, from the Kueue Go module.

The files come from ``config/components`` of the pinned ``sigs.k8s.io/kueue`` module in the Go
module cache. We apply what ``config/default`` would: the ``kueue-`` name prefix, the webhook
namespace selectors of ``components/webhook/kustomization.yaml`` and the conversion-webhook
patches listed in ``components/crd/kustomization.yaml``; every in-cluster service reference
becomes ``url: https://127.0.0.1:<port>/<path>`` with our CA, since Kueue runs as a local process.
"""

from __future__ import annotations

import base64
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import yaml

NAME_PREFIX = "kueue-"
KUEUE_NAMESPACE = "kueue-system"


def module_dir(version: str, tools_dir: Path | None) -> Path:
    """The Kueue module's source in the Go module cache (downloaded through ``go`` when absent)."""
    cache = os.environ.get("GOMODCACHE") or ""
    go = shutil.which("go")
    if not cache and go:
        cache = subprocess.run([go, "env", "GOMODCACHE"], capture_output=True, text=True, check=True).stdout
    folder = Path(cache.strip() or Path.home() / "go" / "pkg" / "mod") / "sigs.k8s.io" / f"kueue@{version}"
    if not folder.is_dir() and go and tools_dir is not None:
        subprocess.run([go, "mod", "download", f"sigs.k8s.io/kueue@{version}"], cwd=tools_dir, check=True)
    if not folder.is_dir():
        raise FileNotFoundError(
            f"Kueue module {version} not found at {folder}: run scripts/k8s-control-plane build"
        )
    return folder


def _load_all(path: Path) -> list[dict[str, Any]]:
    # libyaml's loader: the Workload CRD alone is ~1 MB of YAML
    return [doc for doc in yaml.load_all(path.read_text(), Loader=yaml.CSafeLoader) if doc]


def _client_config(webhook_port: int, path: str, ca_bundle: str) -> dict[str, Any]:
    return {"url": f"https://127.0.0.1:{webhook_port}{path}", "caBundle": ca_bundle}


def crds(kueue_dir: Path, webhook_port: int, ca_cert: Path) -> list[dict[str, Any]]:
    components = kueue_dir / "config" / "components" / "crd"
    ca_bundle = base64.b64encode(ca_cert.read_bytes()).decode()
    kustomization = (components / "kustomization.yaml").read_text()
    patched = set()
    for patch in re.findall(r"^- path: (patches/webhook_in_\S+\.yaml)\s*$", kustomization, re.MULTILINE):
        for doc in _load_all(components / patch):
            patched.add(doc["metadata"]["name"])
    out = []
    for crd_file in sorted((components / "bases").glob("*.yaml")):
        for crd in _load_all(crd_file):
            if crd["metadata"]["name"] in patched:
                crd["spec"]["conversion"] = {
                    "strategy": "Webhook",
                    "webhook": {
                        "clientConfig": _client_config(webhook_port, "/convert", ca_bundle),
                        "conversionReviewVersions": ["v1"],
                    },
                }
            out.append(crd)
    return out


def _selector_patches(kustomization: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """webhook name -> namespaceSelector, from the inline patches of the webhook kustomization."""
    selectors: dict[str, dict[str, Any]] = {}
    for entry in kustomization.get("patches") or []:
        patch = yaml.safe_load(entry.get("patch") or "") or {}
        for webhook in patch.get("webhooks") or []:
            if "namespaceSelector" in webhook:
                selectors[webhook["name"]] = webhook["namespaceSelector"]
    return selectors


def webhook_configurations(kueue_dir: Path, webhook_port: int, ca_cert: Path) -> list[dict[str, Any]]:
    components = kueue_dir / "config" / "components" / "webhook"
    ca_bundle = base64.b64encode(ca_cert.read_bytes()).decode()
    selectors = _selector_patches(yaml.safe_load((components / "kustomization.yaml").read_text()))
    out = []
    for config in _load_all(components / "manifests.yaml"):
        config["metadata"]["name"] = NAME_PREFIX + config["metadata"]["name"]
        for webhook in config.get("webhooks") or []:
            path = webhook["clientConfig"]["service"]["path"]
            webhook["clientConfig"] = _client_config(webhook_port, path, ca_bundle)
            if webhook["name"] in selectors:
                webhook["namespaceSelector"] = selectors[webhook["name"]]
        out.append(config)
    return out


def manager_configuration(
    *, webhook_port: int, cert_dir: Path, health_port: int, metrics_port: int
) -> dict[str, Any]:
    """Kueue's Configuration: pod integration only, our certificates, no leader election."""
    return {
        "apiVersion": "config.kueue.x-k8s.io/v1beta2",
        "kind": "Configuration",
        "namespace": KUEUE_NAMESPACE,
        "health": {"healthProbeBindAddress": f"127.0.0.1:{health_port}"},
        "metrics": {"bindAddress": f"127.0.0.1:{metrics_port}"},
        "webhook": {"port": webhook_port, "host": "127.0.0.1", "certDir": str(cert_dir)},
        "leaderElection": {"leaderElect": False},
        "internalCertManagement": {"enable": False},
        "controller": {"groupKindConcurrency": {"Pod": 5, "Workload.kueue.x-k8s.io": 5}},
        "clientConnection": {"qps": 50, "burst": 100},
        "integrations": {"frameworks": ["pod"]},
    }
