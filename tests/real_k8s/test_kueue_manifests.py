"""Kueue's CRDs and webhooks as the control plane applies them: rewritten to loopback URLs."""

from __future__ import annotations

from pathlib import Path

import pytest

from iris.testing.control_plane import kueue_manifests
from iris.testing.control_plane.binaries import read_versions, repo_root

pytestmark = pytest.mark.real_k8s


@pytest.fixture(scope="module")
def kueue_dir() -> Path:
    root = repo_root()
    assert root is not None
    return kueue_manifests.module_dir(read_versions(root).kueue, root / "tools" / "k8s" / "kueue")


def test_every_webhook_points_at_loopback_with_our_ca(kueue_dir: Path, tmp_path: Path) -> None:
    ca = tmp_path / "ca.crt"
    ca.write_bytes(b"-----BEGIN CERTIFICATE-----\n")
    configs = kueue_manifests.webhook_configurations(kueue_dir, 4242, ca)
    assert {c["metadata"]["name"] for c in configs} == {
        "kueue-mutating-webhook-configuration",
        "kueue-validating-webhook-configuration",
    }
    hooks = [h for c in configs for h in c["webhooks"]]
    assert hooks and all(h["clientConfig"]["url"].startswith("https://127.0.0.1:4242/") for h in hooks)
    assert all("service" not in h["clientConfig"] and h["clientConfig"]["caBundle"] for h in hooks)
    pod_hook = next(h for h in hooks if h["name"] == "mpod.kb.io")
    assert pod_hook["clientConfig"]["url"] == "https://127.0.0.1:4242/mutate--v1-pod"
    excluded = pod_hook["namespaceSelector"]["matchExpressions"][0]["values"]
    assert "kube-system" in excluded and "kueue-system" in excluded


def test_versioned_crds_convert_through_the_local_webhook(kueue_dir: Path, tmp_path: Path) -> None:
    ca = tmp_path / "ca.crt"
    ca.write_bytes(b"x")
    crds = {c["metadata"]["name"]: c for c in kueue_manifests.crds(kueue_dir, 4242, ca)}
    workloads = crds["workloads.kueue.x-k8s.io"]
    assert (
        workloads["spec"]["conversion"]["webhook"]["clientConfig"]["url"] == "https://127.0.0.1:4242/convert"
    )
    assert {v["name"] for v in workloads["spec"]["versions"]} >= {"v1beta1", "v1beta2"}
    assert "conversion" not in crds["resourceflavors.kueue.x-k8s.io"]["spec"]
