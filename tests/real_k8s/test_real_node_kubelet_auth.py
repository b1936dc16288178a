"""The real node's kubelet port is hostile ground: every caller must prove who it is and the API
server's RBAC decides what it may do (Webhook authentication and authorization). A certificate from
the plane's own CA is not enough: CN=mallory, a user without RBAC rights, is refused on /pods,
/runningpods and /exec, a service account token is checked but refused, while the API server (its
kubelet client user bound to system:kubelet-api-admin) still reaches the kubelet."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from iris.testing.control_plane.cluster import ControlPlane, tls_context
from iris.testing.control_plane.pki import CertPair, issue_client_cert

pytestmark = pytest.mark.real_kubelet


def _kubelet_url(cp: ControlPlane) -> str:
    node = cp.real_node
    assert node is not None
    port = cp.kubectl(
        "get", "node", node["name"], "-o", "jsonpath={.status.daemonEndpoints.kubeletEndpoint.Port}"
    ).stdout
    return f"https://{node['node_ip']}:{port}"


def test_a_plane_certificate_without_rbac_rights_is_refused(
    real_kubelet_plane: ControlPlane, tmp_path: Path
) -> None:
    cp = real_kubelet_plane
    pki = cp.run_dir / "pki"
    ca = CertPair(pki / "ca.crt", pki / "ca.key")
    mallory = issue_client_cert(tmp_path, ca, "mallory", "/CN=mallory")
    url = _kubelet_url(cp)
    ns = cp.namespace
    with httpx.Client(base_url=url, verify=tls_context(ca.cert, mallory.cert, mallory.key), timeout=30) as c:
        for method, path in (
            ("GET", "/pods"),
            ("GET", "/runningpods/"),
            ("POST", f"/exec/{ns}/anything/main?command=id&output=1"),
        ):
            response = c.request(method, path)
            assert response.status_code == 403, (path, response.status_code, response.text[:300])
            assert "user=mallory" in response.text, response.text[:300]
    # A bearer token is checked with a TokenReview (no longer 401): the controller's service
    # account is who it says it is, but has no rights on nodes.
    token = {"Authorization": f"Bearer {cp.controller_token}"}
    with httpx.Client(base_url=url, verify=tls_context(ca.cert), timeout=30) as c:
        response = c.get("/pods", headers=token)
        assert response.status_code == 403, (response.status_code, response.text[:300])
        assert c.get("/pods", headers={"Authorization": "Bearer not-a-token"}).status_code == 401
        assert c.get("/pods").status_code == 401  # anonymous is off
    # The API server's own path to the kubelet still works.
    node = cp.real_node
    assert node is not None
    with cp.admin_client() as admin:
        response = admin.get(f"/api/v1/nodes/{node['name']}/proxy/pods")
        assert response.status_code == 200, response.text[:300]
        assert response.json()["kind"] == "PodList"
