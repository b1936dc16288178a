"""A small HTTP client for a real Kubernetes API server, built from a kubeconfig file."""

from __future__ import annotations

import base64
import json
import ssl
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import yaml


class KubeApiError(Exception):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


def _materialise(data: str, directory: Path, name: str) -> str:
    path = directory / name
    path.write_bytes(base64.b64decode(data))
    path.chmod(0o600)
    return str(path)


class KubeClient:
    """JSON requests against ``server`` with the kubeconfig's credentials (client cert or token)."""

    def __init__(self, kubeconfig: Path, *, timeout: float = 30.0) -> None:
        config = yaml.safe_load(Path(kubeconfig).read_text())
        context_name = config.get("current-context") or config["contexts"][0]["name"]
        context = next(c["context"] for c in config["contexts"] if c["name"] == context_name)
        cluster = next(c["cluster"] for c in config["clusters"] if c["name"] == context["cluster"])
        user = next(u["user"] for u in config["users"] if u["name"] == context["user"])
        self._credentials = Path(tempfile.mkdtemp(prefix="iris-kubeclient-"))
        verify: Any = True
        if "certificate-authority-data" in cluster:
            verify = _materialise(cluster["certificate-authority-data"], self._credentials, "ca.crt")
        elif "certificate-authority" in cluster:
            verify = cluster["certificate-authority"]
        cert: tuple[str, str] | None = None
        if "client-certificate-data" in user:
            cert = (
                _materialise(user["client-certificate-data"], self._credentials, "client.crt"),
                _materialise(user["client-key-data"], self._credentials, "client.key"),
            )
        elif "client-certificate" in user:
            cert = (user["client-certificate"], user["client-key"])
        headers = {"Authorization": f"Bearer {user['token']}"} if "token" in user else {}
        self.server = cluster["server"].rstrip("/")
        context = (
            ssl.create_default_context(cafile=verify)
            if isinstance(verify, str)
            else ssl.create_default_context()
        )
        if cert is not None:
            context.load_cert_chain(*cert)
        self._client_args: dict[str, Any] = {"verify": context, "headers": headers}
        self.http = httpx.Client(base_url=self.server, timeout=timeout, **self._client_args)

    def close(self) -> None:
        self.http.close()

    def request(self, method: str, path: str, **kwargs: Any) -> dict[str, Any]:
        response = self.http.request(method, path, **kwargs)
        if response.status_code >= 400:
            try:
                message = response.json().get("message", response.text)
            except ValueError:
                message = response.text
            raise KubeApiError(response.status_code, str(message))
        return response.json() if response.content else {}

    def get(self, path: str, **params: Any) -> dict[str, Any]:
        return self.request("GET", path, params=params or None)

    def try_get(self, path: str) -> dict[str, Any] | None:
        try:
            return self.get(path)
        except KubeApiError as exc:
            if exc.code == 404:
                return None
            raise

    def post(self, path: str, body: dict[str, Any], **params: Any) -> dict[str, Any]:
        return self.request("POST", path, json=body, params=params or None)

    def put(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        return self.request("PUT", path, json=body)

    def merge_patch(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        return self.request(
            "PATCH", path, content=json.dumps(body), headers={"Content-Type": "application/merge-patch+json"}
        )

    def delete(self, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        return self.request("DELETE", path, json=body)

    def watch(
        self, path: str, params: dict[str, Any], timeout_seconds: int = 240
    ) -> Iterator[dict[str, Any]]:
        """Watch events (type, object) until the server closes the stream."""
        query = {**params, "watch": "true", "allowWatchBookmarks": "true", "timeoutSeconds": timeout_seconds}
        timeout = httpx.Timeout(30.0, read=timeout_seconds + 30.0)
        with httpx.Client(base_url=self.server, timeout=timeout, **self._client_args) as client:
            with client.stream("GET", path, params=query) as response:
                if response.status_code >= 400:
                    response.read()
                    raise KubeApiError(response.status_code, response.text[:500])
                for line in response.iter_lines():
                    if line.strip():
                        yield json.loads(line)
